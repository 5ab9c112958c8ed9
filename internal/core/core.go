// Package core is weft's shared vocabulary: inode numbers, file types and
// attributes, credentials, name rules and chunk arithmetic. It does no I/O and
// imports nothing of weft's but errs, so every other package may use it.
package core

import (
	"fmt"
	"time"
)

// Ino is a 64-bit inode number. The top ServerBits bits name the meta server
// that allocated it, so allocation never needs coordination (DESIGN: namespace).
type Ino uint64

const (
	// RootIno is the root directory, allocated by meta server 0.
	RootIno Ino = 1
	// ServerBits is how many high bits of an Ino name its allocating server.
	ServerBits = 12
	// MaxServers is the largest number of meta servers a cluster can have.
	MaxServers = 1 << ServerBits
)

// MakeIno builds the inode number of server's seq-th allocation.
func MakeIno(server int, seq uint64) Ino {
	return Ino(uint64(server)<<(64-ServerBits) | seq&(1<<(64-ServerBits)-1))
}

// Server returns the id of the meta server that allocated ino.
func (i Ino) Server() int { return int(uint64(i) >> (64 - ServerBits)) }

// Seq returns the per-server sequence part of ino.
func (i Ino) Seq() uint64 { return uint64(i) & (1<<(64-ServerBits) - 1) }

func (i Ino) String() string { return fmt.Sprintf("%d", uint64(i)) }

// File type bits of a mode, with Linux's values so that modes pass to the
// kernel unchanged.
const (
	ModeType   uint32 = 0o170000
	ModeSocket uint32 = 0o140000
	ModeLink   uint32 = 0o120000
	ModeFile   uint32 = 0o100000
	ModeBlock  uint32 = 0o060000
	ModeDir    uint32 = 0o040000
	ModeChar   uint32 = 0o020000
	ModeFIFO   uint32 = 0o010000

	ModeSetuid uint32 = 0o4000
	ModeSetgid uint32 = 0o2000
	ModeSticky uint32 = 0o1000
	ModePerm   uint32 = 0o777
	// ModeBits is everything chmod may set.
	ModeBits uint32 = 0o7777
)

// IsDir reports whether mode is a directory's.
func IsDir(mode uint32) bool { return mode&ModeType == ModeDir }

// IsRegular reports whether mode is a regular file's.
func IsRegular(mode uint32) bool { return mode&ModeType == ModeFile }

// IsSymlink reports whether mode is a symbolic link's.
func IsSymlink(mode uint32) bool { return mode&ModeType == ModeLink }

// Attr is what stat(2) reports about a file.
type Attr struct {
	Ino   Ino
	Mode  uint32 // type and permission bits
	Nlink uint32
	UID   uint32
	GID   uint32
	Rdev  uint32
	Size  uint64
	Atime time.Time
	Mtime time.Time
	Ctime time.Time
}

// IsDir reports whether a describes a directory.
func (a Attr) IsDir() bool { return IsDir(a.Mode) }

// Blocks returns the number of 512-byte blocks a file of a's size occupies,
// as stat(2) reports it.
func (a Attr) Blocks() uint64 { return (a.Size + 511) / 512 }

// Creds are the identity a request runs with.
type Creds struct {
	UID    uint32
	GID    uint32
	Groups []uint32
}

// Root is the superuser's identity.
var Root = Creds{}

// InGroup reports whether gid is c's primary or a supplementary group.
func (c Creds) InGroup(gid uint32) bool {
	if c.GID == gid {
		return true
	}
	for _, g := range c.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// DirEntry is one name in a directory listing.
type DirEntry struct {
	Name string
	Ino  Ino
	Mode uint32 // type bits always; permission bits only with attributes
	Attr *Attr  // present when the listing was asked for attributes
}
