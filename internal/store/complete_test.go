package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftfs/weft/internal/errs"
	"github.com/weftfs/weft/proto/weftpb"
)

// wantIncomplete checks that every read of s is errs.Lost, whether s holds
// the chunk or not.
func wantIncomplete(t *testing.T, s *Server, what string) {
	t.Helper()
	out := tempFile(t, "dst", nil, os.O_RDWR)
	for _, k := range []ChunkKey{{1, 0}, {1, 1}, {42, 7}} {
		_, _, err := readReply(s, k.Ino, k.Index, 0, 100)
		wantKind(t, what+": read of "+k.String(), err, errs.Lost)
		_, err = localIO(t, s, &weftpb.LocalIORequest{Chunk: cid(k.Ino, k.Index), Length: 100}, out)
		wantKind(t, what+": same-host read of "+k.String(), err, errs.Lost)
	}
}

// TestReplacementStoreIsIncomplete is issue 12 item 1a on the store's side:
// a store that replaces one which held data must not answer the chunks it
// lacks as holes, nor the chunks that writes created since as whole.
func TestReplacementStoreIsIncomplete(t *testing.T) {
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			cfg := bc.cfg(t)
			cfg.Replacement = true
			s := openStore(t, cfg)
			mustWrite(t, s, 1, 0, 100, []byte("only this write"))
			wantIncomplete(t, s, "replacement store")
			if got := listAll(t, s, 0, 0); len(got) != 1 {
				t.Fatalf("an incomplete store lists %d chunks, want 1", len(got))
			}
			id, incomplete := s.Identity()
			if !incomplete || len(id) != 32 {
				t.Fatalf("Identity = %q, %v", id, incomplete)
			}
			err := s.MarkComplete(context.Background(), strings.Repeat("0", 32))
			wantKind(t, "MarkComplete with another store's id", err, errs.Stale)
			wantIncomplete(t, s, "after a refused MarkComplete")
			if err := s.MarkComplete(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			r, _, err := readReply(s, 42, 7, 0, 100)
			if err != nil || r.Found {
				t.Fatalf("missing chunk of a complete store: %v, %v", r, err)
			}
			wantBytes(t, "chunk after MarkComplete", mustRead(t, s, 1, 0, 100, 100), []byte("only this write"))
		})
	}
}

func reopen(t *testing.T, s *Server, cfg Config) *Server {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Registry = prometheus.NewRegistry()
	return openStore(t, cfg)
}

// TestIncompleteSurvivesRestart: the incomplete state is in the data
// directory's marker, so a restart (without Replacement) keeps it until
// MarkComplete, and Replacement does not touch a formatted directory.
func TestIncompleteSurvivesRestart(t *testing.T) {
	cfg := Config{Backend: "disk", Dir: t.TempDir(), Replacement: true}
	s := openStore(t, cfg)
	id, _ := s.Identity()
	s = reopen(t, s, Config{Backend: "disk", Dir: cfg.Dir})
	wantIncomplete(t, s, "after a restart")
	if id2, _ := s.Identity(); id2 != id {
		t.Fatalf("identity changed across a restart: %s, %s", id, id2)
	}
	if err := s.MarkComplete(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, cfg)
	if _, incomplete := s.Identity(); incomplete {
		t.Fatal("complete store incomplete after a restart with Replacement")
	}
	r, _, err := readReply(s, 1, 0, 0, 10)
	if err != nil || r.Found {
		t.Fatalf("missing chunk: %v, %v", r, err)
	}
}

// TestLostChunksDirectory: the data directory keeps its marker but its
// chunks directory is gone (a lost mount, a wiped subtree). Before the
// marker, the store restarted empty and every chunk read as a hole.
func TestLostChunksDirectory(t *testing.T) {
	dir := t.TempDir()
	s, _ := diskStore(t, dir)
	mustWrite(t, s, 1, 0, 0, []byte("data"))
	s.Close()
	if err := os.RemoveAll(filepath.Join(dir, "chunks")); err != nil {
		t.Fatal(err)
	}
	s, _ = diskStore(t, dir)
	wantIncomplete(t, s, "store that lost its chunks directory")
	s.Close()
	s, _ = diskStore(t, dir)
	wantIncomplete(t, s, "after another restart")
}

// TestFreshStoreIsComplete: a new store of a new cluster has no chunks to
// lack: a missing chunk is a hole.
func TestFreshStoreIsComplete(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Server) {
		if _, incomplete := s.Identity(); incomplete {
			t.Fatal("a fresh store is incomplete")
		}
		r, _, err := readReply(s, 1, 0, 0, 10)
		if err != nil || r.Found {
			t.Fatalf("missing chunk: %v, %v", r, err)
		}
	})
}

// TestOldFormatDirectoryRefused: chunks without a marker were written by an
// older weft (chunk format 1): Open refuses them with a clear message.
func TestOldFormatDirectoryRefused(t *testing.T) {
	dir := t.TempDir()
	s, _ := diskStore(t, dir)
	mustWrite(t, s, 1, 0, 0, []byte("data"))
	s.Close()
	if err := os.Remove(filepath.Join(dir, markerName)); err != nil {
		t.Fatal(err)
	}
	_, err := Open(Config{Backend: "disk", Dir: dir, Registry: prometheus.NewRegistry()})
	wantKind(t, "open of an old store", err, errs.Invalid)
	if !strings.Contains(err.Error(), "older weft") {
		t.Fatalf("error %q does not say why", err)
	}
	_, err = s.ListChunks(context.Background(), &weftpb.ListChunksRequest{})
	wantKind(t, "closed store", err, errs.Unavailable)
}
