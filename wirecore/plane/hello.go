package plane

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// helloRequired lists the keys a hello must carry, as dotted paths, in the
// order they are checked.
var helloRequired = [...]string{
	"machine_id", "label", "tags", "capabilities.runners", "versions.daemon", "versions.protocol",
}

// MissingHelloField reports the first required key absent from a raw
// hello body, as a dotted path ("capabilities.runners"); "" when all are
// present. Absent means the key is not in the map: a decoded struct cannot
// tell an absent key from an empty value, so this reads the raw map. When
// a parent object is itself absent, its own name is reported
// ("capabilities"). A body that is not a map is an error. Nothing is
// allocated for the keys the body holds: only the required ones are
// looked for.
func MissingHelloField(raw []byte) (string, error) {
	var top [len(helloParents)][]byte
	if err := lookupKeys(raw, helloParents[:], top[:]); err != nil {
		return "", fmt.Errorf("plane: hello body: %w", err)
	}
	for _, path := range helloRequired {
		parent, child, nested := cutDot(path)
		v := top[slices.Index(helloParents[:], parent)]
		if v == nil {
			return parent, nil
		}
		if !nested {
			continue
		}
		var inner [1][]byte
		if err := lookupKeys(v, []string{child}, inner[:]); err != nil {
			return "", fmt.Errorf("plane: hello %s: %w", parent, err)
		}
		if inner[0] == nil {
			return path, nil
		}
	}
	return "", nil
}

// helloParents are the top-level keys of helloRequired, each once.
var helloParents = [...]string{"machine_id", "label", "tags", "capabilities", "versions"}

func cutDot(path string) (string, string, bool) {
	for i := 0; i < len(path); i++ {
		if path[i] == '.' {
			return path[:i], path[i+1:], true
		}
	}
	return path, "", false
}

// lookupKeys reads a msgpack map and sets vals[i] to the raw value of
// keys[i] (the last one, when a key repeats), nil when the key is absent.
// The count the map announces is checked against the bytes that follow
// and against the collection limit before anything is read: it comes from
// the wire, and a hello is the first thing an unauthenticated peer may
// send.
func lookupKeys(b []byte, keys []string, vals [][]byte) error {
	n, rest, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return err
	}
	if n > wire.MaxCollectionEntries {
		return fmt.Errorf("map announces %d entries, more than the %d allowed: %w", n, wire.MaxCollectionEntries, msgp.ErrLimitExceeded)
	}
	// Every entry takes at least two bytes, a key and a value.
	if uint64(n)*2 > uint64(len(rest)) {
		return fmt.Errorf("map announces %d entries in %d bytes: %w", n, len(rest), msgp.ErrShortBytes)
	}
	for ; n > 0; n-- {
		var k []byte
		k, rest, err = msgp.ReadMapKeyZC(rest)
		if err != nil {
			return err
		}
		after, err := msgp.Skip(rest)
		if err != nil {
			return err
		}
		for i := range keys {
			if string(k) == keys[i] {
				vals[i] = rest[:len(rest)-len(after)]
			}
		}
		rest = after
	}
	return nil
}

func (p *Plane) onHello(now time.Time, e Hello) {
	if e.Missing != "" {
		p.reply(e.Req, StatusUnprocessableEntity, wire.ValidationError{Error: wire.InvalidMissingField, Field: e.Missing,
			Message: e.Missing + ": required"})
		return
	}
	h := &e.Body
	h.Versions.Tidy()
	if v := h.Validate(); v != nil {
		p.reply(e.Req, StatusUnprocessableEntity, *v)
		return
	}
	if h.Versions.Protocol == nil || *h.Versions.Protocol != wire.ProtocolVersion {
		got := "null"
		if h.Versions.Protocol != nil {
			got = fmt.Sprintf("%q", *h.Versions.Protocol)
		}
		resp := p.helloResponse(now, nil)
		resp.Reject = &wire.Reject{
			Code:    wire.RejectProtocolMismatch,
			Message: fmt.Sprintf("protocol %s is not supported; this control plane speaks %q", got, wire.ProtocolVersion),
		}
		p.reply(e.Req, StatusOK, resp)
		return
	}
	if _, known := p.byMachine[h.MachineID]; !known && len(p.workers) >= p.cfg.MaxWorkers {
		p.replies = append(p.replies, Reply{Req: e.Req, Status: StatusServiceUnavailable, RetryAfterS: WorkerLimitRetryAfterS,
			Body: ErrorBody{Error: ErrWorkerLimit, Message: fmt.Sprintf(
				"this control plane admits at most %d workers and has %d; machine %q is not one of them (raise nymph serve --max-workers, or forget lost workers: nymph ctl forget, serve --forget-lost-after)",
				p.cfg.MaxWorkers, len(p.workers), h.MachineID)}})
		return
	}
	en, ok := p.helloAuth(now, &e)
	if !ok {
		return
	}
	var target string
	if prev := p.workers[p.byMachine[e.Body.MachineID]]; prev != nil {
		target = prev.rec.TargetVersion
	}
	w := p.admit(now, &e.Body, en)
	id := w.rec.ID
	resp := p.helloResponse(now, &id)
	if len(w.rec.Extensions) > 0 {
		// Only to a daemon that announced them: a plain protocol "1"
		// daemon gets the config map it always got.
		resp.Config[wire.ConfigExtensions] = wire.EncodeExtensions(w.rec.Extensions)
	}
	if w.uses(wire.ExtConfig) {
		liveConfig(resp.Config, w)
		w.configSent = w.rec.ConfigGen
	}
	if en != nil {
		resp.KeyID = &en.keyID
	}
	rep := Reply{Req: e.Req, Status: StatusOK, Body: resp}
	if target != "" {
		running := ""
		if v := e.Body.Versions.Daemon; v != nil {
			running = *v
		}
		rep.Update = &UpdateOutcome{WorkerID: id, Running: running, Target: target}
	}
	p.replies = append(p.replies, rep)
}

// settleUpdate reads a hello as the end of the update u: the version sent
// means updated; another version, after the update was delivered, means
// the worker came back without it (rolled back). An update still queued
// is not settled by a hello: the worker has not seen it yet.
func settleUpdate(u *UpdateRecord, running string, now time.Time) {
	switch {
	case u == nil || u.State == UpdateDone || u.State == UpdateRolledBack:
	case running == u.Version:
		u.State, u.At, u.Running = UpdateDone, now, running
	case u.State == UpdateDelivered:
		u.State, u.At, u.Running = UpdateRolledBack, now, running
	}
}

// unapplied settles the commands a restarted daemon was handed under a
// cursor (wire.ExtCursor): those its hello's cursor reaches are
// forgotten, and the others it never applied, so their runs and execs are
// not lost with the restart — its next poll gets them again. It returns
// their invocation and exec ids. A daemon that no longer agrees to the
// cursor has them forgotten, as without one.
func (p *Plane) unapplied(w *worker, h *wire.HelloRequest) map[string]bool {
	if len(w.unconfirmed) == 0 {
		return nil
	}
	if !w.uses(wire.ExtCursor) || !slices.Contains(wire.AgreedExtensions(h.Extensions), wire.ExtCursor) {
		p.confirm(w, math.MaxUint64)
		return nil
	}
	p.confirm(w, wire.ParseCursor(h.Cursor))
	keep := map[string]bool{}
	for _, c := range w.unconfirmed {
		if c.ExecID != "" {
			keep[c.ExecID] = true
		}
		if c.InvocationID != "" {
			keep[c.InvocationID] = true
		}
	}
	return keep
}

// admit creates the worker of a machine_id, or refreshes the one it has:
// a daemon that restarts keeps its worker id, its queued commands and its
// setup FIFO. en, when set, is the key the hello enrolled.
func (p *Plane) admit(now time.Time, h *wire.HelloRequest, en *enrolment) *worker {
	w := p.workers[p.byMachine[h.MachineID]]
	if w != nil {
		p.forgetInFlight(w, now, p.unapplied(w, h))
	}
	if w == nil {
		id := p.newWorkerID(now)
		w = &worker{rec: WorkerRecord{ID: id, MachineID: h.MachineID, CreatedAt: now, State: WorkerActive}}
		p.workers[id] = w
		p.workerOrder = append(p.workerOrder, w)
		p.byMachine[h.MachineID] = id
	}
	if en != nil {
		p.enrol(now, w, en)
	}
	r := &w.rec
	r.Label = h.Label
	if r.Label == "" {
		r.Label = r.ID
	}
	r.Tags = pinTags(h.Tags, r.PinnedTags)
	r.Queues = pinQueue(h.Lanes, r.PinnedQueue)
	r.Capabilities = h.Capabilities
	r.Capabilities.Runners = slices.Clone(h.Capabilities.Runners)
	r.Versions = h.Versions
	r.Extensions = wire.AgreedExtensions(h.Extensions)
	w.ext = wire.ExtSetOf(r.Extensions)
	r.CapabilitiesGen = 0 // a restarted daemon counts its refreshes afresh
	r.LastSeen = now
	r.HibernateUntil = time.Time{}
	if r.TargetVersion != "" && h.Versions.Daemon != nil && *h.Versions.Daemon == r.TargetVersion {
		r.TargetVersion = ""
	}
	settleUpdate(r.Update, deref(h.Versions.Daemon), now)
	// A restarted daemon has forgotten setups it had not acked, and its
	// hello carries freshly detected capabilities: only the FIFO counts.
	p.setupsDone(w, noSetup)
	r.AwaitingCapabilities = false
	r.State = p.settledState(w)
	p.putWorker(w)
	return w
}

func (p *Plane) helloResponse(now time.Time, workerID *string) wire.HelloResponse {
	token := p.newULID(now)
	// Whole seconds, so the value goes out as an integer that a daemon
	// typing it i64 or f64 reads alike; skew below a second is noise
	// beside a round trip and the 60-second signature window.
	serverTime := wire.Number(now.Unix())
	return wire.HelloResponse{
		WorkerID:           workerID,
		SessionToken:       &token,
		SessionTTLS:        SessionTTLS,
		Config:             map[string]msgp.Raw{},
		KeyRotationMaxAgeS: wire.Number(p.cfg.KeyRotationMaxAgeS),
		ServerTimeEpochS:   &serverTime,
	}
}

// settledState is the state of a worker that is polling (or just said
// hello): setting_up while its setup FIFO is not drained, a setup is in
// flight, or refreshed capabilities are awaited; active otherwise.
func (p *Plane) settledState(w *worker) string {
	if w.rec.AwaitingCapabilities || len(w.rec.SetupsInFlight) > 0 {
		return WorkerSettingUp
	}
	for i := range w.pending {
		if w.pending[i].Kind == wire.KindSetup {
			return WorkerSettingUp
		}
	}
	return WorkerActive
}

// ExitWorkerRestarted is the exit code recorded for an exec its daemon
// lost by restarting, or whose worker was forgotten (abandonExecs): the
// spawn-failure sentinel, as for a cancellation.
const ExitWorkerRestarted = wire.ExitSpawnFailed

// forgetInFlight ends what a worker had in flight when it says hello
// again: a hello starts a new daemon process, which has none of the old
// one's runs or execs (a daemon that drains acks everything before it
// exits, so this only catches crashes). A run is failed as WorkerLost and
// an exec gets a result with exit code -1, so nobody waits forever.
func (p *Plane) forgetInFlight(w *worker, now time.Time, keep map[string]bool) {
	for _, id := range p.runningOf(w.ID()) {
		if inv := p.invocations[id]; !keep[id] {
			p.failLost(inv, now, fmt.Sprintf("worker %s restarted before the invocation finished", w.ID()))
		}
	}
	ids := make([]string, 0, len(w.openExecs))
	for id := range w.openExecs {
		if !keep[id] {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	exs := make([]*ExecRecord, len(ids))
	for i, id := range ids {
		exs[i] = p.execs[id]
	}
	p.abandonExecs(exs, "worker restarted before the exec finished", now)
}
