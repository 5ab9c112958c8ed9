package cli

// weft status: ask every server of the cluster file what it holds, and show
// which are down.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/weftfs/weft/internal/auth"
	"github.com/weftfs/weft/internal/cluster"
	"github.com/weftfs/weft/internal/config"
	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/internal/repair"
	"github.com/weftfs/weft/internal/rpc"
	"github.com/weftfs/weft/proto/weftpb"
)

// clusterStatus is what weft status shows, and its --json output.
type clusterStatus struct {
	ClusterFile string            `json:"cluster_file"`
	Name        string            `json:"name"`
	Durability  string            `json:"durability"`
	Meta        []metaStatus      `json:"meta"`
	Store       []storeStatus     `json:"store"`
	Top         []partitionStatus `json:"top_partitions"`
	Replicas    *replicaStatus    `json:"replicas,omitempty"`
	Leases      *leaseStatus      `json:"leases,omitempty"`
	Writeback   *writebackStatus  `json:"writeback,omitempty"`
}

// writebackStatus sums the meta servers' write-back batches since they
// started (writeback mounts, apply_batch).
type writebackStatus struct {
	Batches uint64 `json:"batches"`
	Ops     uint64 `json:"ops"`
	Refused uint64 `json:"refused"` // refused whole: the writer had lost its lease
}

// leaseStatus sums the meta servers' lease counts (internal/lease).
type leaseStatus struct {
	Held     uint64 `json:"held"`
	Sessions uint64 `json:"sessions"`
	Granted  uint64 `json:"granted"`
	Recalled uint64 `json:"recalled"`
	Expired  uint64 `json:"expired"` // recalled, never released: the holder died or stalled
}

func (l *leaseStatus) add(r *weftpb.LeaseStatusReply) {
	l.Held += r.GetHeld()
	l.Sessions += r.GetSessions()
	l.Granted += r.GetGranted()
	l.Recalled += r.GetRecalled()
	l.Expired += r.GetExpired()
}

// replicaStatus is what a dry-run repair pass found: chunks whose placed
// copies are missing or stale (internal/repair).
type replicaStatus struct {
	Replication     int    `json:"replication"`
	Erasure         string `json:"erasure,omitempty"` // "ec:K+M": the counts are of stripes and their units
	Chunks          int64  `json:"chunks"`
	UnderReplicated int64  `json:"under_replicated"`
	Missing         int64  `json:"missing_copies"`
	Stale           int64  `json:"stale_copies"`
	Marked          int64  `json:"stale_parity_stripes,omitempty"` // erasure: stripes whose parity a client's cache marked stale
	Error           string `json:"error,omitempty"`                // the pass could not list every store
}

// serverState is what every server's row has.
type serverState struct {
	ID    int    `json:"id"`
	Addr  string `json:"addr"`
	Up    bool   `json:"up"`
	Error string `json:"error,omitempty"` // why it is down, or what is wrong with it
}

type metaStatus struct {
	serverState
	Servers    uint32 `json:"servers"` // meta servers the server counts in its cluster
	Inodes     int64  `json:"inodes"`
	Dirs       int64  `json:"dirs"`
	Partitions uint64 `json:"partitions"`
	Entries    uint64 `json:"entries"`
	Splits     uint64 `json:"splits"`
	Redirects  uint64 `json:"redirects"`
	Durability string `json:"durability,omitempty"`
}

type storeStatus struct {
	serverState
	Used     uint64 `json:"used"`      // bytes the store's chunks take
	DiskUsed uint64 `json:"disk_used"` // bytes in use on its backend: a disk's whole file system
	Capacity uint64 `json:"capacity"`
	Chunks   uint64 `json:"chunks"`
	// Incomplete: the store lost chunks (a replaced disk) and serves no
	// reads until repair has copied them back.
	Incomplete bool `json:"incomplete,omitempty"`
}

type partitionStatus struct {
	Meta    int    `json:"meta"` // the server holding the partition
	Dir     uint64 `json:"dir"`
	Index   uint32 `json:"index"`
	Radix   uint32 `json:"radix"`
	Entries uint64 `json:"entries"`
}

// maxTopPartitions bounds weft status --top.
const maxTopPartitions = 1000

func newStatusCommand(a *app) *cobra.Command {
	var (
		asJSON  bool
		top     int
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every server of the cluster: up or down, and what it holds",
		Long: "Ask every meta and store server of the cluster file (--cluster or\n" +
			"$" + ClusterEnv + ") for a summary and print one row per server, then the\n" +
			"largest directory partitions. A server that does not answer is shown as\n" +
			"down, and status then exits with code 4 after printing the others.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if top < 0 || top > maxTopPartitions {
				return usageErrorf(cmd, "--top %d: want 0 to %d", top, maxTopPartitions)
			}
			if timeout <= 0 {
				return usageErrorf(cmd, "--timeout %v: want a duration above 0", timeout)
			}
			cfg, err := a.loadCluster("")
			if err != nil {
				return err
			}
			dial, err := cluster.DialOptions(cfg, "")
			if err != nil {
				return err
			}
			st := gatherStatus(cmd.Context(), cfg, dial, top, timeout)
			st.ClusterFile = a.clusterPath
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(st); err != nil {
					return err
				}
			} else {
				printStatus(cmd.OutOrStdout(), st)
			}
			return st.problem()
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "print the status as JSON")
	fl.IntVar(&top, "top", 5, "show the N largest directory partitions (0: none)")
	fl.DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for each server")
	return cmd
}

// gatherStatus asks every server at once, each call bounded by timeout.
func gatherStatus(ctx context.Context, cfg *config.Cluster, dial rpc.DialOptions, top int, timeout time.Duration) *clusterStatus {
	st := &clusterStatus{
		Name:       cfg.Name,
		Durability: cfg.Durability,
		Meta:       make([]metaStatus, len(cfg.Meta)),
		Store:      make([]storeStatus, len(cfg.Store)),
	}
	tops := make([][]*weftpb.PartitionStatus, len(cfg.Meta)) // by meta server
	byOwner := make([]*weftpb.StatusReply, len(cfg.Meta))    // the replies, by meta server
	// Lease counts, by meta server; nil from a server without leases.
	leases := make([]*weftpb.LeaseStatusReply, len(cfg.Meta))
	var wg sync.WaitGroup
	for i, m := range cfg.Meta {
		wg.Go(func() {
			s := &st.Meta[i]
			s.serverState = serverState{ID: i, Addr: m.Addr}
			var r weftpb.StatusReply
			if !callServer(ctx, &s.serverState, dial, timeout, weftpb.MethodStatus, &weftpb.StatusRequest{TopPartitions: uint32(top)}, &r) {
				return
			}
			s.Servers, s.Inodes, s.Dirs = r.GetServers(), r.GetInodes(), r.GetDirs()
			s.Partitions, s.Entries = r.GetPartitions(), r.GetEntries()
			s.Splits, s.Redirects, s.Durability = r.GetSplits(), r.GetRedirects(), r.GetDurability()
			tops[i] = r.GetTop()
			byOwner[i] = &r
			var lr weftpb.LeaseStatusReply
			ls := s.serverState
			if callServer(ctx, &ls, dial, timeout, weftpb.MethodLeaseStatus, &weftpb.LeaseStatusRequest{}, &lr) {
				leases[i] = &lr
			}
			switch {
			case int(r.GetServerId()) != i:
				// Clients would send this server's requests to another.
				s.Error = fmt.Sprintf("answers as meta server %d: the cluster file's [[meta]] list does not match the servers", r.GetServerId())
			case r.GetServers() != 0 && int(r.GetServers()) != len(cfg.Meta):
				// It places directory partitions on another set of servers.
				s.Error = fmt.Sprintf("counts %d meta servers, the cluster file lists %d: it was started from another cluster file", r.GetServers(), len(cfg.Meta))
			}
		})
	}
	for i, sv := range cfg.Store {
		wg.Go(func() {
			s := &st.Store[i]
			s.serverState = serverState{ID: i, Addr: sv.Addr}
			var r weftpb.StoreStatFSReply
			if callServer(ctx, &s.serverState, dial, timeout, weftpb.MethodStoreStatFS, &weftpb.StoreStatFSRequest{WantStored: true}, &r) {
				// USED is what the store's chunks take; a server from
				// before want_stored reports only its disk's use.
				s.Used, s.Capacity, s.Chunks = r.GetStored(), r.GetCapacity(), r.GetChunks()
				s.DiskUsed, s.Incomplete = r.GetUsed(), r.GetIncomplete()
				if r.GetStored() == 0 && r.GetChunks() > 0 {
					s.Used = r.GetUsed()
				}
			}
		})
	}
	wg.Wait()
	st.sumCounts(byOwner)
	for _, r := range byOwner {
		if r != nil && (r.GetWritebackBatches() != 0 || r.GetWritebackRefused() != 0) {
			if st.Writeback == nil {
				st.Writeback = &writebackStatus{}
			}
			st.Writeback.Batches += r.GetWritebackBatches()
			st.Writeback.Ops += r.GetWritebackOps()
			st.Writeback.Refused += r.GetWritebackRefused()
		}
	}
	for _, lr := range leases {
		if lr != nil {
			if st.Leases == nil {
				st.Leases = &leaseStatus{}
			}
			st.Leases.add(lr)
		}
	}
	if len(cfg.Store) > 1 && (cfg.Replication > 1 || cfg.Erasure().Enabled()) {
		st.Replicas = gatherReplicas(ctx, cfg, dial, timeout)
	}

	// Each meta server reports its own largest partitions; show the
	// largest of all.
	st.Top = largestPartitions(tops, top)
	return st
}

// gatherReplicas lists every store's chunks (a dry-run repair pass: no
// data is read) and counts the chunks whose placed copies are missing or
// stale.
func gatherReplicas(ctx context.Context, cfg *config.Cluster, dial rpc.DialOptions, timeout time.Duration) *replicaStatus {
	stores, closeStores := storePeers(cfg, dial)
	defer closeStores()
	r, err := repair.Run(ctx, repair.Config{Stores: stores, Replication: cfg.Replication, Erasure: cfg.Erasure(), Only: -1, DryRun: true, CallTimeout: timeout,
		Capability: cluster.AdminCapability(cfg, auth.Read)})
	rs := &replicaStatus{Replication: cfg.Replication}
	if cfg.Erasure().Enabled() {
		rs.Erasure = cfg.Erasure().String()
	}
	switch {
	case err != nil:
		rs.Error = err.Error()
	case len(r.Unreachable) > 0:
		rs.Error = fmt.Sprintf("stores %v could not be listed", r.Unreachable)
	}
	if r != nil {
		rs.Chunks, rs.UnderReplicated, rs.Missing, rs.Stale, rs.Marked = r.Chunks, r.UnderReplicated, r.Missing, r.Stale, r.Marked
	}
	return rs
}

// sumCounts sets each meta server's INODES and DIRS: the inodes it
// allocated that are in use. An inode allocated on one server may be
// removed on another, so every server reports its share of each server's
// counts and a server's count is the sum of the shares (of the servers that
// answered: with one down, the others' counts may be off by its share).
func (st *clusterStatus) sumCounts(replies []*weftpb.StatusReply) {
	for i := range st.Meta {
		st.Meta[i].Inodes, st.Meta[i].Dirs = 0, 0
	}
	for i, r := range replies {
		switch {
		case r == nil: // down
		case len(r.GetInodesByOwner()) == 0: // from before the shares
			st.Meta[i].Inodes += r.GetInodes()
			st.Meta[i].Dirs += r.GetDirs()
		default:
			// A down server's row shows no counts: the shares of it
			// that others hold are no count of their own.
			for owner, n := range r.GetInodesByOwner() {
				if owner < len(st.Meta) && st.Meta[owner].Up {
					st.Meta[owner].Inodes += n
				}
			}
			for owner, n := range r.GetDirsByOwner() {
				if owner < len(st.Meta) && st.Meta[owner].Up {
					st.Meta[owner].Dirs += n
				}
			}
		}
	}
}

// callServer makes one call to the server of s and records whether it
// answered.
func callServer(ctx context.Context, s *serverState, dial rpc.DialOptions, timeout time.Duration, method uint16, req, resp proto.Message) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	peer := rpc.NewPeer(s.Addr, dial)
	defer peer.Close()
	if err := peer.Call(ctx, method, req, resp); err != nil {
		s.Error = err.Error()
		return false
	}
	s.Up = true
	return true
}

// problem returns the error status exits with: servers down or wrong.
func (st *clusterStatus) problem() error {
	bad, total := 0, len(st.Meta)+len(st.Store)
	for _, m := range st.Meta {
		if !m.Up || m.Error != "" {
			bad++
		}
	}
	for _, s := range st.Store {
		if !s.Up || s.Error != "" {
			bad++
		}
	}
	if bad == 0 {
		return nil
	}
	return errs.New(errs.Unavailable, "status", "%d of %d servers are down or misconfigured", bad, total)
}

func printStatus(w io.Writer, st *clusterStatus) {
	fmt.Fprintf(w, "cluster %s", st.Name)
	if st.ClusterFile != "" {
		fmt.Fprintf(w, " (%s)", st.ClusterFile)
	}
	fmt.Fprintf(w, ": %d meta, %d store servers, %s durability\n\n", len(st.Meta), len(st.Store), st.Durability)

	// A down server's row ends with its error in the STATE column, which
	// is left out of the alignment (no tab after it) so a long error does
	// not widen every row.
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tID\tADDR\tSTATE\tINODES\tDIRS\tPARTITIONS\tENTRIES\tSPLITS\tREDIRECTS")
	for _, m := range st.Meta {
		if !m.Up {
			fmt.Fprintf(tw, "meta\t%d\t%s\tdown: %s\n", m.ID, m.Addr, m.Error)
			continue
		}
		fmt.Fprintf(tw, "meta\t%d\t%s\tup\t%d\t%d\t%d\t%d\t%d\t%d", m.ID, m.Addr,
			m.Inodes, m.Dirs, m.Partitions, m.Entries, m.Splits, m.Redirects)
		if m.Error != "" {
			fmt.Fprintf(tw, "\t%s", m.Error)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "ROLE\tID\tADDR\tSTATE\tUSED\tDISK USED\tCAPACITY\tCHUNKS")
	for _, s := range st.Store {
		if !s.Up {
			fmt.Fprintf(tw, "store\t%d\t%s\tdown: %s\n", s.ID, s.Addr, s.Error)
			continue
		}
		state := "up"
		if s.Incomplete {
			state = "repairing"
		}
		fmt.Fprintf(tw, "store\t%d\t%s\t%s\t%s\t%s\t%s\t%d\n", s.ID, s.Addr, state, humanBytes(s.Used), humanBytes(s.DiskUsed), humanBytes(s.Capacity), s.Chunks)
	}
	tw.Flush()
	if r := st.Replicas; r != nil && r.Erasure != "" {
		printStripes(w, r)
	} else if r != nil {
		fmt.Fprintf(w, "\nreplicas (R=%d): %d chunks, %d under-replicated", r.Replication, r.Chunks, r.UnderReplicated)
		if r.UnderReplicated > 0 {
			fmt.Fprintf(w, " (copies missing %d, stale %d): the stores repair them in the background, or run weft repair", r.Missing, r.Stale)
		}
		if r.Error != "" {
			fmt.Fprintf(w, "; incomplete count: %s", r.Error)
		}
		fmt.Fprintln(w)
	}
	if l := st.Leases; l != nil {
		fmt.Fprintf(w, "\nleases: %d held by %d client sessions; since start %d granted, %d recalled, %d expired unreleased\n",
			l.Held, l.Sessions, l.Granted, l.Recalled, l.Expired)
	}
	if wb := st.Writeback; wb != nil {
		fmt.Fprintf(w, "write-back: since start %d batches of %d operations applied, %d refused\n", wb.Batches, wb.Ops, wb.Refused)
	}

	if len(st.Top) > 0 {
		fmt.Fprintf(w, "\nlargest directory partitions\n")
		fmt.Fprintln(tw, "META\tDIR\tINDEX\tRADIX\tENTRIES")
		for _, p := range st.Top {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\n", p.Meta, p.Dir, p.Index, p.Radix, p.Entries)
		}
		tw.Flush()
	}
}

// humanBytes formats n with a binary unit: "512 B", "1.5 GiB".
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// largestPartitions merges the servers' largest partitions and keeps the
// top n.
func largestPartitions(byServer [][]*weftpb.PartitionStatus, n int) []partitionStatus {
	all := []partitionStatus{}
	for meta, ps := range byServer {
		for _, p := range ps {
			all = append(all, partitionStatus{Meta: meta, Dir: p.GetDir(), Index: p.GetIndex(), Radix: p.GetRadix(), Entries: p.GetEntries()})
		}
	}
	slices.SortFunc(all, func(a, b partitionStatus) int {
		return cmp.Or(cmp.Compare(b.Entries, a.Entries), cmp.Compare(a.Meta, b.Meta),
			cmp.Compare(a.Dir, b.Dir), cmp.Compare(a.Index, b.Index))
	})
	if len(all) > n {
		all = all[:n]
	}
	return all
}
