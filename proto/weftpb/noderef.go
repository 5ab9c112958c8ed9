package weftpb

// ToOwner drops the entry a NodeRef names, leaving the ino: the client sends
// the request again to the ino's owner (GIGA+ routing).
func (r *NodeRef) ToOwner() { r.Parent, r.Name = 0, "" }
