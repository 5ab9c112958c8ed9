package bench

// The seeds' own published numbers, shown beside weft's, labelled as the
// paper's and with the paper's hardware. Where a seed has only a graph, the
// table says what the graph shows in words.

var paperMicro = Table{
	Title: "**The paper's numbers** (Ringer, seed 000, table \"Metadata Micro-benchmarks\"): µs, mean of 1,000 " +
		"runs timed with gettimeofday(). Hardware: a MacBook (client and MDS over loopback for \"local\"); " +
		"a remote MDS over a DSL line or gigabit Ethernet; \"mixed\" is a local MDS proxying to a remote one over DSL.",
	Header: []string{"test", "local", "remote (DSL)", "remote (GigE)", "mixed (DSL)"},
	Rows: [][]string{
		{"put_rnode()", "223", "14,575", "746", "n/a"},
		{"get_rnode()", "472", "35,308", "724", "n/a"},
		{"get_read()", "413", "31,103", "501", "33,000"},
		{"get_write()", "791", "4,403", "524", "786"},
		{"end_read()", "498", "33,471", "530", "57,000"},
		{"end_write()", "874", "5,403", "525", "829"},
	},
	Notes: []string{"Ringer's put_rnode, end_read and end_write return without waiting for the server; " +
		"weft's setattr waits for the server's acknowledgement (its durability mode decides when that is)."},
}

var paperSeqread = Table{
	Title: "**The paper's result** (Ringer, seed 000, figure \"Read50x\"): seconds to read 2^n bytes, 2 B to 2 MB, " +
		"mean of 50 runs, Ringer vs SSHFS over gigabit Ethernet (the reader on another machine than the " +
		"client holding the file and the MDS). The figure has no published values; the text says the times " +
		"\"are very similar\": the MDS lookup is eclipsed by the data transfer.",
	Header: []string{"system", "result"},
	Rows:   [][]string{{"Ringer vs SSHFS, GigE", "very similar at every size (graph only)"}},
}

var paperAndrew = Table{
	Title: "**The paper's result** (Snapdragon, seed 001, Fig. 14, FAST'03): elapsed time per phase for secure, " +
		"non-secure and NFS; graph only. One client and one network-attached disk (or NFS server) on separate " +
		"machines. Input: Linux kernel source, 690 directories, 10,528 files, ~127 MB; phase V generates 1,362 " +
		"files (13 MB).",
	Header: []string{"phase", "what the paper reports"},
	Rows: [][]string{
		{"I mkdir ×5", "Snapdragon slower than NFS (its metadata server reaches its disk over the network)"},
		{"II copy", "Snapdragon slower than NFS (small-file open/close cost)"},
		{"III list, IV read twice, V make", "Snapdragon ≈ NFS"},
		{"all", "secure ≈ non-secure"},
	},
}

var paperCheckpoint = Table{
	Title: "**The paper's setup** (GIGA+ on PanFS, seed 002, LANL N-N checkpoint): aggregate write and read " +
		"GB/s, 640 GB per volume; figures only. 5 test nodes (64 cores, 40GE each) against a PanFS cluster of " +
		"5 shelves (5 metadata nodes, 50 storage nodes); caches dropped by unmount/remount before the shifted read.",
	Header: []string{"phase", "what the paper reports"},
	Rows:   [][]string{{"write, read", "layering GIGA+ on PanFS leaves the data path's bandwidth unaffected (graphs only)"}},
}

var paperUntar = Table{
	Title: "**The paper's numbers** (Featherstitch/\"Kudos\" draft, seed 003): untar and delete of " +
		"linux-2.6.15 from a tar cached in RAM, seconds, including the time to sync to disk. Machines: " +
		"\"identical machines\" in the draft; the published SOSP'07 version used a Pentium 4 3.2 GHz, " +
		"912 MB RAM, a 7200 RPM SATA disk.",
	Header: []string{"system", "untar (s)", "delete (s)"},
	Rows: [][]string{
		{"Kudos (ext2, soft updates)", "16.05", "6.03"},
		{"Kudos (ext2, async)", "5.27", "2.99"},
		{"FreeBSD 5.4 (soft updates)", "20.47", "4.71"},
		{"FreeBSD 5.4 (async)", "9.63", "3.72"},
		{"Linux 2.6.20.1 (ext2)", "6.05", "0.44"},
		{"Linux 2.6.20.1 (ext3)", "12.02", "0.37"},
	},
}

var paperPostmark = Table{
	Title:  "**The paper's numbers** (Featherstitch/\"Kudos\" draft, seed 003): PostMark, seconds; same machines as untar.",
	Header: []string{"system", "time (s)"},
	Rows: [][]string{
		{"Kudos (ext2)", "48.1"},
		{"Linux 2.6.20.1 (ext2)", "16.9"},
		{"Linux 2.6.20.1 (ext3)", "19.6"},
	},
}

var paperLatfs = Table{
	Title: "**The paper's numbers** (Network RamDisk, seed 004, Figs. 8–9, HBench-OS lat_fs): ms per file, " +
		"2,000 files; only the 16 KB creation is given in the text, the rest is graphs. Client: DEC Alpha " +
		"3000/300, 32 MB RAM, Digital Unix 4.0; two servers of the same model.",
	Header: []string{"file size", "magnetic disk, create", "Network RamDisk, create"},
	Rows:   [][]string{{"16 KB", "116.22 ms (8.60 files/s)", "22.68 ms (44.09 files/s)"}},
}

var paperSeqio = Table{
	Title: "**The paper's result** (Network RamDisk, seed 004, Fig. 10): IOZONE v2.01 sequential file I/O, " +
		"disk vs Network RamDisk, same DEC Alpha machines as lat_fs; graph only: remote memory gives " +
		"\"significantly higher\" sequential throughput than the magnetic disk.",
	Header: []string{"system", "result"},
	Rows:   [][]string{{"Network RamDisk vs disk", "significantly higher (graph only)"}},
}
