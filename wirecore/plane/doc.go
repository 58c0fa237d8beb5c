// Package plane is the control plane of protocol "1" as a pure state
// machine: the decisions `nymph serve` makes, without any I/O.
//
// A host feeds it events (a hello, a poll, an ack, an exec result, a log
// chunk, an operator request, a clock tick, a poll deadline) and carries out
// the effects it returns (persist this batch of records, reply to request N,
// park poll N until T). Step takes the current time beside each event, and
// ids are drawn from the entropy source in Config, so a transcript of
// events always yields the same effects.
//
// It decides: admission of a hello (protocol_mismatch, 422 for a missing
// field, worker ids by machine_id), what a poll receives (one exec, one
// setup from the worker's FIFO, one run that fits, every control command,
// target_nymph_version) and how long it parks, worker health (lost after
// 3× the poll cap without a poll), invocation and exec lifecycles, and the
// order and offsets of log chunks.
//
// A parked poll is answered when something for its worker arrives, at its
// deadline, and also at once — with whatever the worker may take now,
// possibly nothing — when that worker reports a finished exec, run or
// setup (a first result or ack; repeats change nothing). A daemon behind
// a FIFO relay or a spool cannot abandon a poll in flight to send a fresh
// one, so this answer is what wakes its loop when a slot frees.
//
// It does not decide bearer authentication, request size limits or
// encodings (hostio/planeserver does), nor how records are stored (the
// host's Store): it only says which records changed, in a Batch that must
// be durable before any reply of the same Step is sent. Log chunk bytes are
// handed to the store and never kept here; a logs reply names the byte range
// the host reads back from the store.
//
// It reads no clock, starts no goroutine and touches no global state, so it
// runs unchanged under GOOS=js and GOOS=wasip1, or inside a request handler
// that loads a Snapshot, steps one event and stores the Batch.
//
// The driver contract, in short: call Step with one event at a time, in
// the order things happened, with the time each happened; name every
// Request with an id unique among those still open; apply a Persist
// durably before sending any Reply of the same Step (several Steps'
// batches may share one apply, folded by a BatchMerger, their replies
// sent after it); send each Reply to its request's client; and step
// PollDeadline when a Park's Until passes, Gone when a client leaves,
// Undelivered when a poll's reply could not be written, and Tick about
// once a second. Example shows that loop.
package plane
