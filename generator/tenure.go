package generator

// Tenure is one node's hold on one slot, as the cluster's Raft log records
// it: the holder may stamp timestamps t with Floor < t <= Granted, the window
// its Generator for Slot was started above and granted up to. ClaimedIndex is
// the log index of the Claim that opened the tenure (its identity),
// ReleasedIndex that of the entry that ended it.
//
// The cluster keeps its tenures in this type (cluster.Tenure is an alias), and
// the uniqueness checker behind `idctl verify` checks IDs against the same
// values as ClusterService.History reports them. It is defined here, below
// both, so that the checker and the client need not import the cluster.
//
// Tenures are stored as JSON in the Raft state's snapshots under their Go
// field names: the fields carry no JSON tags, and renaming a field or adding
// a tag changes the snapshot format.
type Tenure struct {
	Slot          int
	NodeID        string
	Floor         int64
	Granted       int64
	ClaimedIndex  uint64
	ReleasedIndex uint64 // 0 while the slot is still held
}
