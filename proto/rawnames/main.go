// Command rawnames lets file names and symlink targets be any bytes but NUL
// and '/' on the wire, as Linux allows, while they stay Go strings.
//
// proto3 string fields must hold UTF-8: protobuf-go refuses to marshal or
// unmarshal anything else, and proto3 has no way to say otherwise. Turning
// these fields into bytes would change their Go type to []byte at every use.
// Protobuf editions can say it (features.utf8_validation = NONE), but the
// protoc this project pins (Debian's 3.21) predates editions. So `make proto`
// runs this after protoc-gen-go: it restates each generated file descriptor
// as edition 2023 with proto3's semantics as file features (implicit
// presence, open enums, packed repeated fields, UTF-8 checked), and turns the
// UTF-8 check off on the fields below only. The Go types and the encoding on
// the wire are unchanged.
//
// Usage: rawnames FILE.pb.go...
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// rawFields are the fields that carry file names or symlink targets.
var rawFields = map[string]bool{
	"weft.v1.NodeRef.name":           true,
	"weft.v1.LookupRequest.name":     true,
	"weft.v1.CreateRequest.name":     true,
	"weft.v1.MkdirRequest.name":      true,
	"weft.v1.SymlinkRequest.name":    true,
	"weft.v1.SymlinkRequest.target":  true,
	"weft.v1.ReadlinkReply.target":   true,
	"weft.v1.UnlinkRequest.name":     true,
	"weft.v1.RmdirRequest.name":      true,
	"weft.v1.RenameRequest.src_name": true,
	"weft.v1.RenameRequest.dst_name": true,
	"weft.v1.LinkRequest.new_name":   true,
	"weft.v1.DirEntryMsg.name":       true,
	"weft.v1.PeerGetRequest.name":    true,
	// Write-back batches (metadata write-back).
	"weft.v1.BatchCreate.name":  true,
	"weft.v1.BatchUnlink.name":  true,
	"weft.v1.BatchSetAttr.name": true,
	"weft.v1.BatchRename.src":   true,
	"weft.v1.BatchRename.dst":   true,
	"weft.v1.BatchWrite.name":   true,
	"weft.v1.BatchOwner.name":   true,
	"weft.v1.BatchMkdir.name":   true,
	"weft.v1.BatchRmdir.name":   true,
}

func main() {
	found := 0
	for _, path := range os.Args[1:] {
		n, err := rewrite(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "rawnames: %s: %v\n", path, err)
			os.Exit(1)
		}
		found += n
	}
	if found != len(rawFields) {
		fmt.Fprintf(os.Stderr, "rawnames: marked %d fields, want %d: a field was renamed or removed\n", found, len(rawFields))
		os.Exit(1)
	}
}

// asEdition restates a proto3 file as edition 2023 with proto3's semantics.
func asEdition(fd *descriptorpb.FileDescriptorProto) {
	fd.Syntax = proto.String("editions")
	fd.Edition = descriptorpb.Edition_EDITION_2023.Enum()
	if fd.Options == nil {
		fd.Options = &descriptorpb.FileOptions{}
	}
	fd.Options.Features = &descriptorpb.FeatureSet{
		FieldPresence:         descriptorpb.FeatureSet_IMPLICIT.Enum(),
		EnumType:              descriptorpb.FeatureSet_OPEN.Enum(),
		RepeatedFieldEncoding: descriptorpb.FeatureSet_PACKED.Enum(),
		Utf8Validation:        descriptorpb.FeatureSet_VERIFY.Enum(),
		MessageEncoding:       descriptorpb.FeatureSet_LENGTH_PREFIXED.Enum(),
		JsonFormat:            descriptorpb.FeatureSet_ALLOW.Enum(),
	}
}

// rewrite marks the raw fields in the file descriptor of one generated file
// and returns how many it marked.
func rewrite(path string) (int, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	lines := strings.SplitAfter(string(src), "\n")
	start, end := -1, -1
	for i, l := range lines {
		if strings.HasPrefix(l, "const file_") && strings.Contains(l, "_rawDesc = ") {
			start = i
		}
		if start >= 0 && i > start && !strings.HasSuffix(strings.TrimRight(l, "\n"), " +") {
			end = i
			break
		}
	}
	if start < 0 || end < 0 {
		return 0, fmt.Errorf("no raw descriptor constant")
	}
	var raw strings.Builder
	for _, l := range lines[start+1 : end+1] {
		lit := strings.TrimSuffix(strings.TrimSpace(l), " +")
		s, err := strconv.Unquote(lit)
		if err != nil {
			return 0, fmt.Errorf("line %d: %v", start+2, err)
		}
		raw.WriteString(s)
	}
	var fd descriptorpb.FileDescriptorProto
	if err := proto.Unmarshal([]byte(raw.String()), &fd); err != nil {
		return 0, err
	}
	marked := 0
	for _, m := range fd.GetMessageType() {
		for _, f := range m.GetField() {
			if !rawFields[fd.GetPackage()+"."+m.GetName()+"."+f.GetName()] {
				continue
			}
			if f.Options == nil {
				f.Options = &descriptorpb.FieldOptions{}
			}
			f.Options.Features = &descriptorpb.FeatureSet{Utf8Validation: descriptorpb.FeatureSet_NONE.Enum()}
			marked++
		}
	}
	if marked == 0 {
		return 0, nil
	}
	if fd.GetSyntax() == "proto3" {
		asEdition(&fd)
	}
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(&fd)
	if err != nil {
		return 0, err
	}
	var b strings.Builder
	w := bufio.NewWriter(&b)
	w.WriteString(lines[start])
	for i := 0; i < len(out); i += 64 {
		sep := " +\n"
		if i+64 >= len(out) {
			sep = "\n"
		}
		fmt.Fprintf(w, "\t%s%s", strconv.Quote(string(out[i:min(i+64, len(out))])), sep)
	}
	w.Flush()
	result := strings.Join(lines[:start], "") + b.String() + strings.Join(lines[end+1:], "")
	return marked, os.WriteFile(path, []byte(result), 0o644)
}
