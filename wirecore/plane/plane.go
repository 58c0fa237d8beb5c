package plane

import (
	"cmp"
	"crypto/ed25519"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Config holds the plane's policy and its entropy source.
type Config struct {
	// Entropy supplies the random bytes of every id (worker ids, command
	// ids, exec ids, invocation ids, session tokens). Hosts pass
	// crypto/rand.Reader; tests pass a deterministic reader. Required.
	Entropy io.Reader
	// PollCap caps a poll's timeout_s (default DefaultPollCap).
	PollCap time.Duration
	// LostAfter is how long a worker may go without polling before it is
	// lost (default lostAfterPolls × PollCap: DefaultLostAfter at the
	// default PollCap).
	LostAfter time.Duration
	// PersistSeenEvery bounds how stale the LastSeen a Persist carries
	// may be (default DefaultPersistSeenEvery). A host whose health
	// checks read the stored value, because it restores the plane for
	// each request (CountHealthFrom), sets it well below LostAfter.
	PersistSeenEvery time.Duration
	// ChunkURLBase prefixes the stdout_url handed to streamed execs
	// ("https://plane.example", no trailing slash): protocol "1" hands the
	// daemon a URL. Hosts set it (planeserver requires it); empty, as in
	// transcript tests, hands out the bare path.
	ChunkURLBase string
	// TargetVersion, when set, is sent as target_nymph_version to every
	// worker whose versions.daemon differs (a per-worker update wins).
	TargetVersion string
	// KeyRotationMaxAgeS is the advisory key_rotation_max_age_s of hello,
	// in whole seconds (sent as an integer).
	KeyRotationMaxAgeS int64
	// Retain is how long finished execs (with their logs) and finished
	// invocations are kept after they finished; Tick forgets older ones,
	// in memory and in the store. Zero keeps them forever.
	Retain time.Duration
	// MaxWorkers bounds the workers the plane registers (lost ones
	// included): the hello of a new machine past it is refused 503 with
	// ErrWorkerLimit; a known machine's hello is always admitted.
	// Default DefaultMaxWorkers.
	MaxWorkers int
	// Audience is this control plane's origin ("https://plane.example"),
	// which every signature must name: a request signed for another
	// control plane is refused here. Empty skips that one check (the
	// transcripts that do not test it).
	Audience string
	// OtherAudiences are further origins of this same control plane (the
	// other names its certificate carries, "https://10.0.0.5:8383"): a
	// daemon that reaches it by one of them signs for that one, and it is
	// the same plane, so the signature is taken.
	OtherAudiences []string
	// RequireSignatures refuses every unsigned daemon request, bearer or
	// not: once every host has joined with a token, the shared bearer
	// admits nobody.
	RequireSignatures bool
	// ForgetLostAfter, when positive, forgets a worker lost for that long
	// at a Tick, as ForgetWorker does: a fleet whose machines come and go
	// under new machine ids does not fill MaxWorkers with ones that never
	// return. It counts from when the worker became lost (LostAfter into
	// its silence, with the same excuses for hibernation and restarts),
	// not from its last poll. Zero keeps them.
	ForgetLostAfter time.Duration
	// MaxNonces bounds the nonces of signed requests the plane remembers
	// inside the window (zero: identity.DefaultMaxNonces); past it a
	// signed request is refused 503 nonce_memory_full.
	MaxNonces int
}

// DefaultPollCap is Config.PollCap when it is not positive: the
// daemon's default wait_max_s, so a default fleet parks for all of it.
const DefaultPollCap = 20 * time.Second

// lostAfterPolls is how many poll caps of silence make a worker lost when
// Config.LostAfter is not set: a daemon re-polls as soon as a parked poll
// returns, so missing several in a row is not a slow network.
const lostAfterPolls = 3

// DefaultLostAfter is Config.LostAfter when neither it nor PollCap is set.
const DefaultLostAfter = lostAfterPolls * DefaultPollCap

// DefaultMaxWorkers is Config.MaxWorkers when it is not positive.
const DefaultMaxWorkers = 10000

// WorkerLimitRetryAfterS is the Retry-After, in seconds, of a hello refused
// for ErrWorkerLimit: room appears only when an operator makes it, so a
// daemon need not knock often.
const WorkerLimitRetryAfterS = 60

// SessionTTLS is the session_ttl_s of every hello response, in whole
// seconds (sent as an integer).
const SessionTTLS = 86400

// DefaultPersistSeenEvery bounds how stale a stored LastSeen may be:
// polls move LastSeen in memory and only every so often in the store, so
// an idle fleet does not write on every poll (a fleet polling every 20 s
// would otherwise rewrite every worker record each time). A stale stored
// value costs a long-lived plane nothing: health counts from the restore
// after a restart (restoredAt), and the operator API shows the in-memory
// value.
const DefaultPersistSeenEvery = 5 * time.Minute

// Plane is the control-plane state machine. It is not safe for concurrent
// use: one owner steps it.
type Plane struct {
	cfg Config
	seq uint64

	workers     map[string]*worker
	workerOrder []*worker         // creation order, for stable listings and sweeps without a map lookup each
	byMachine   map[string]string // machine_id → worker id

	invocations map[string]*InvocationRecord
	invOrder    []string
	// queued holds queued invocations oldest first.
	queued []*InvocationRecord
	// alive is when each running invocation was last reported by its
	// worker; runningOn indexes the same invocations by worker id, so a
	// worker's runs are found without walking every running one (a hello
	// herd after an outage asks for each worker's). They change only
	// through setRunning, reported and clearRunning.
	alive     map[string]time.Time
	runningOn map[string]map[string]struct{}
	// stamps and unreported let a Tick look only at the running
	// invocations that may be unreported, not at every one (a plane
	// ticks every second). stamps holds, earliest first, an alive time of
	// each running invocation no later than its current one: setRunning
	// pushes it, and an entry that comes up while its invocation has
	// been reported since is pushed again at that time. An entry that
	// comes up LostAfter old and still current moves its invocation to
	// unreported, where each Tick looks at it until it is reported
	// again, fails, or ends: a parked poll that listed it, or a restore,
	// may hold it back a while yet.
	stamps     minHeap[stamp]
	unreported map[string]struct{}
	// tails are the last stdout_tail each invocation's polls reported (at
	// most wire.StdoutTailMax bytes), kept in memory only: the next poll
	// after a restart brings it back.
	tails map[string]string

	execs map[string]*ExecRecord

	// finished lists finished execs and invocations in the order they
	// finished, for Retain. invOrder keeps the ids of forgotten ones until
	// they are half of it.
	finished []finishedRef

	parked map[RequestID]*parked
	// inOrder and deadlines order the parked requests by their until, so
	// a Tick finds the ones due without looking at every parked request.
	// A park whose until is not before the last queued one's (a fleet's
	// polls parked for the cap, in arrival order: nearly all of them) is
	// appended to inOrder; the others go to the heap. An entry whose
	// request is no longer parked (or parked anew) is skipped when it comes
	// up, and both are compacted when such entries pile up.
	inOrder   deadlineFIFO
	deadlines deadlineHeap
	// pollOrder lists parked polls in the order they parked (entries of
	// polls answered since are skipped and compacted lazily).
	pollOrder []parkedPoll
	// logWaits lists parked log waits by exec id.
	logWaits map[string][]RequestID
	// sentBy finds the worker whose lastReply a request is, so an
	// Undelivered (a FIFO relay may report a whole backlog of them) is
	// one lookup, not a walk of the fleet. Kept by sent and unsent.
	sentBy map[RequestID]*worker
	// setupBy finds the worker that has a setup in flight, by command id
	// (setupSent and setupsDone keep it with the records).
	setupBy map[string]*worker

	// restoredAt gives every restored worker a fresh LostAfter window:
	// daemons cannot poll a server that was down.
	restoredAt time.Time

	// byKey finds the worker of a current or previous key id; revoked
	// the worker whose key an operator revoked.
	byKey   map[string]string
	revoked map[string]string
	// tokens are the join tokens by id, tokenByHash by SecretHash, and
	// tokenOrder their ids in minting order.
	tokens      map[string]*TokenRecord
	tokenByHash map[string]*TokenRecord
	tokenOrder  []string
	// nonces remembers the nonces of signed requests inside the window.
	// It is not stored: after a restart a request captured in the last
	// identity.Window could be accepted once more, until its timestamp
	// goes stale (docs/protocol.md, "Request signatures").
	nonces identity.NonceMemory

	batch   BatchMerger // the step's
	replies []Effect
	out     []Effect
}

// worker is a WorkerRecord plus what only lives in memory.
type worker struct {
	// The fields a poll touches come first, next to the record's start:
	// with a whole fleet parked, each cache line a poll spans is a miss.
	//
	// poll is the worker's parked poll, when hasPoll.
	poll    RequestID
	hasPoll bool
	// ext is rec.Extensions as a set, asked on every poll.
	ext wire.ExtSet
	// configSent is the ConfigGen last sent to the daemon (extension
	// wire.ExtConfig); a poll reply carries the config while it is behind.
	configSent uint64
	// pending are the worker's undelivered commands, oldest first.
	pending []CommandRecord
	// unconfirmed are the commands handed out under a cursor
	// (wire.ExtCursor) that the daemon's cursor has not reached, oldest
	// first: a poll with a lower cursor gets them again.
	unconfirmed []CommandRecord
	// park is the worker's parked poll, when hasPoll: a worker has at
	// most one, so it lives here rather than in an allocation per poll.
	park parked
	// persistedSeen is the LastSeen the store holds.
	persistedSeen time.Time
	// freedAt is when a run or exec of the worker ended, by its daemon's
	// word, while every permit of it was taken (busy): its daemon polls
	// again from then, and its silence counts from then.
	freedAt time.Time
	// lastReply is the request of the last poll reply that carried
	// commands, and lastSent those commands, so an Undelivered can put
	// them back.
	lastReply RequestID
	lastSent  []CommandRecord

	rec WorkerRecord

	// openExecs are the worker's delivered execs without a result.
	openExecs map[string]struct{}
	// pub and prevPub are rec.PublicKey and rec.PrevPublicKey decoded.
	pub, prevPub ed25519.PublicKey
}

type parkKind int

const (
	parkPoll parkKind = iota + 1
	parkLogs
)

// parkedPoll is a pollOrder entry: poll req of worker w.
type parkedPoll struct {
	req RequestID
	w   *worker
}

// current reports whether the poll is still parked: asked of its
// worker, which holds its one parked poll, rather than of the map.
func (o parkedPoll) current() bool { return o.w.hasPoll && o.w.poll == o.req }

// parked is one open request the plane will answer later.
type parked struct {
	kind   parkKind
	until  time.Time
	w      *worker   // poll: whose
	queue  string    // poll: the queue the poll asked for
	full   bool      // poll: its daemon has no permit free (control commands only)
	at     time.Time // poll: when it arrived: keepAlive stamped the runs it listed with it
	execID string    // logs
	offset int64     // logs
}

// New returns an empty plane.
func New(cfg Config) *Plane {
	p, err := Restore(cfg, Snapshot{}, time.Time{})
	if err != nil {
		panic(fmt.Sprintf("plane: restore of an empty snapshot: %v", err)) // unreachable
	}
	return p
}

// Restore rebuilds a plane from the records a store kept. now starts every
// worker's health window afresh. Parked requests are not restored: their
// daemons retry against the new process.
func Restore(cfg Config, snap Snapshot, now time.Time) (*Plane, error) {
	if cfg.PollCap <= 0 {
		cfg.PollCap = DefaultPollCap
	}
	if cfg.PersistSeenEvery <= 0 {
		cfg.PersistSeenEvery = DefaultPersistSeenEvery
	}
	if cfg.LostAfter <= 0 {
		cfg.LostAfter = lostAfterPolls * cfg.PollCap
	}
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = DefaultMaxWorkers
	}
	p := &Plane{
		cfg:         cfg,
		workers:     make(map[string]*worker, len(snap.Workers)),
		byMachine:   make(map[string]string, len(snap.Workers)),
		invocations: make(map[string]*InvocationRecord, len(snap.Invocations)),
		alive:       make(map[string]time.Time),
		runningOn:   make(map[string]map[string]struct{}),
		unreported:  make(map[string]struct{}),
		tails:       make(map[string]string),
		execs:       make(map[string]*ExecRecord, len(snap.Execs)),
		parked:      make(map[RequestID]*parked),
		logWaits:    make(map[string][]RequestID),
		sentBy:      make(map[RequestID]*worker),
		setupBy:     make(map[string]*worker),
		restoredAt:  now,
		byKey:       make(map[string]string),
		revoked:     make(map[string]string),
		tokens:      make(map[string]*TokenRecord, len(snap.Tokens)),
		tokenByHash: make(map[string]*TokenRecord, len(snap.Tokens)),
		nonces:      identity.NonceMemory{Max: cfg.MaxNonces},
	}
	ws := slices.Clone(snap.Workers)
	slices.SortFunc(ws, func(a, b WorkerRecord) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	for _, r := range ws {
		if r.ID == "" {
			return nil, fmt.Errorf("plane: restore: worker record without id")
		}
		w := &worker{rec: r, persistedSeen: r.LastSeen, ext: wire.ExtSetOf(r.Extensions)}
		if err := p.restoreKeys(w); err != nil {
			return nil, err
		}
		p.workers[r.ID] = w
		p.workerOrder = append(p.workerOrder, w)
		p.byMachine[r.MachineID] = r.ID
		for _, s := range r.SetupsInFlight {
			p.setupBy[s.CommandID] = w
		}
	}
	p.restoreTokens(snap.Tokens)
	cmds := slices.Clone(snap.Commands)
	slices.SortFunc(cmds, func(a, b CommandRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	for _, c := range cmds {
		w := p.workers[c.WorkerID]
		if w == nil {
			return nil, fmt.Errorf("plane: restore: command %s names unknown worker %s", c.ID, c.WorkerID)
		}
		if c.Cursor > 0 {
			w.unconfirmed = append(w.unconfirmed, c)
		} else {
			w.pending = append(w.pending, c)
		}
		p.seq = max(p.seq, c.Seq)
	}
	for _, w := range p.workers {
		slices.SortFunc(w.unconfirmed, func(a, b CommandRecord) int { return cmp.Compare(a.Cursor, b.Cursor) })
	}
	invs := slices.Clone(snap.Invocations)
	slices.SortFunc(invs, func(a, b InvocationRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	for i := range invs {
		r := invs[i]
		p.invocations[r.ID] = &r
		p.invOrder = append(p.invOrder, r.ID)
		p.seq = max(p.seq, r.Seq)
		switch r.State {
		case InvocationQueued:
			p.queued = append(p.queued, &r)
		case InvocationRunning:
			p.setRunning(&r, now)
		}
	}
	for i := range snap.Execs {
		r := snap.Execs[i]
		p.execs[r.ExecID] = &r
		if w := p.workers[r.WorkerID]; w != nil && r.State == ExecDelivered {
			w.openExec(r.ExecID, true)
		}
	}
	p.restoreFinished()
	return p, nil
}

// Snapshot returns every record the plane holds, as a store would after
// applying every Batch so far (chunk bytes excepted). LastSeen is the
// in-memory value, which may be newer than the stored one.
func (p *Plane) Snapshot() Snapshot {
	var s Snapshot
	for _, w := range p.workerOrder {
		s.Workers = append(s.Workers, cloneWorker(w.rec))
		s.Commands = append(s.Commands, w.pending...)
		s.Commands = append(s.Commands, w.unconfirmed...)
	}
	for _, id := range p.invOrder {
		if inv := p.invocations[id]; inv != nil {
			s.Invocations = append(s.Invocations, *inv)
		}
	}
	ids := make([]string, 0, len(p.execs))
	for id := range p.execs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s.Execs = append(s.Execs, *p.execs[id])
	}
	for _, id := range p.tokenOrder {
		s.Tokens = append(s.Tokens, cloneToken(*p.tokens[id]))
	}
	return s
}

// Step applies one event that happened at now and returns its effects: at
// most one Persist, first, then Replies and Parks. The returned slice and
// the Batch in it are valid until the next Step.
func (p *Plane) Step(now time.Time, ev Event) []Effect {
	p.batch.Reset()
	p.replies = p.replies[:0]
	p.dispatch(now, ev)
	p.out = p.out[:0]
	if !p.batch.Empty() {
		p.out = append(p.out, Persist{Batch: p.batch.Batch()})
	}
	p.out = append(p.out, p.replies...)
	return p.out
}

// Parked counts the requests the plane holds open (polls and log waits).
func (p *Plane) Parked() int { return len(p.parked) }

// PendingCommands counts the commands queued for their worker, not handed
// out yet.
func (p *Plane) PendingCommands() int {
	n := 0
	for _, w := range p.workerOrder {
		n += len(w.pending)
	}
	return n
}

func (p *Plane) reply(req RequestID, status int, body any) {
	p.replies = append(p.replies, Reply{Req: req, Status: status, Body: body})
}

func (p *Plane) park(req RequestID, until time.Time) {
	p.replies = append(p.replies, Park{Req: req, Until: until})
	d := deadline{until: until, req: req}
	if !p.inOrder.push(d) {
		p.deadlines.push(d)
	}
	if p.inOrder.len()+len(p.deadlines) > 2*len(p.parked)+64 {
		p.rebuildDeadlines()
	}
}

// current reports whether d is still the deadline of a parked request.
func (p *Plane) current(d deadline) bool {
	pk := p.parked[d.req]
	return pk != nil && pk.until.Equal(d.until)
}

// rebuildDeadlines drops the entries of requests no longer parked.
func (p *Plane) rebuildDeadlines() {
	p.inOrder.keep(p.current)
	kept := p.deadlines[:0]
	for _, d := range p.deadlines {
		if p.current(d) {
			kept = append(kept, d)
		}
	}
	p.deadlines = kept
	p.deadlines.init()
}

// dueParked pops the parked requests whose until is not after now: the
// polls first, then the log waits, each in request order (the order a
// sweep of every parked request had).
func (p *Plane) dueParked(now time.Time) []RequestID {
	var due []RequestID
	for {
		d, ok := p.inOrder.first()
		if !ok || d.until.After(now) {
			break
		}
		p.inOrder.pop()
		if p.current(d) {
			due = append(due, d.req)
		}
	}
	for len(p.deadlines) > 0 && !p.deadlines[0].until.After(now) {
		if d := p.deadlines.pop(); p.current(d) {
			due = append(due, d.req)
		}
	}
	slices.SortFunc(due, func(a, b RequestID) int {
		if ka, kb := p.parked[a].kind, p.parked[b].kind; ka != kb {
			return cmp.Compare(ka, kb)
		}
		return cmp.Compare(a, b)
	})
	return due
}

// deadline is one parked request's until.
type deadline struct {
	until time.Time
	req   RequestID
}

// deadlineFIFO is a queue of deadlines in until order, taken only while
// they come in that order.
type deadlineFIFO struct {
	d    []deadline
	head int // d[:head] are popped
}

func (f *deadlineFIFO) len() int { return len(f.d) - f.head }

// push appends d unless it is earlier than the last one queued.
func (f *deadlineFIFO) push(d deadline) bool {
	if n := len(f.d); n > f.head && d.until.Before(f.d[n-1].until) {
		return false
	}
	f.d = append(f.d, d)
	return true
}

func (f *deadlineFIFO) first() (deadline, bool) {
	if f.len() == 0 {
		return deadline{}, false
	}
	return f.d[f.head], true
}

func (f *deadlineFIFO) pop() {
	f.head++
	if f.head == len(f.d) {
		f.d, f.head = f.d[:0], 0
	} else if f.head >= 1024 && 2*f.head >= len(f.d) {
		f.d, f.head = f.d[:copy(f.d, f.d[f.head:])], 0
	}
}

// keep drops the entries ok refuses, in place and in order.
func (f *deadlineFIFO) keep(ok func(deadline) bool) {
	kept := f.d[:0]
	for _, d := range f.d[f.head:] {
		if ok(d) {
			kept = append(kept, d)
		}
	}
	f.d, f.head = kept, 0
}

// deadlineHeap holds the deadlines that came out of until order.
type deadlineHeap = minHeap[deadline]

// before orders deadlines by until, then by request.
func (d deadline) before(o deadline) bool {
	if !d.until.Equal(o.until) {
		return d.until.Before(o.until)
	}
	return d.req < o.req
}

func (p *Plane) dispatch(now time.Time, ev Event) {
	switch e := ev.(type) {
	case Hello:
		p.onHello(now, e)
	case Poll:
		p.onPoll(now, e)
	case PollDeadline:
		p.onDeadline(now, e.Req)
	case Gone:
		p.onGone(now, e.Req)
	case Undelivered:
		p.onUndelivered(now, e)
	case Ack:
		p.onAck(now, e)
	case ExecResult:
		p.onExecResult(now, e)
	case Chunk:
		p.onChunk(now, e)
	case Tick:
		p.onTick(now)
	case ListWorkers:
		p.onListWorkers(e)
	case GetWorker:
		p.onGetWorker(e)
	case EnqueueExec:
		p.onEnqueueExec(now, e)
	case EnqueueSetup:
		p.onEnqueueSetup(now, e)
	case EnqueueHibernate:
		p.onEnqueueHibernate(now, e)
	case EnqueueReset:
		p.onEnqueueReset(now, e)
	case EnqueueUpdate:
		p.onEnqueueUpdate(now, e)
	case EnqueueRotateKey:
		p.onEnqueueRotateKey(now, e)
	case GetExec:
		p.onGetExec(e)
	case WaitLogs:
		p.onWaitLogs(now, e)
	case ListInvocations:
		p.onListInvocations(e)
	case GetInvocation:
		p.onGetInvocation(e)
	case EnqueueRun:
		p.onEnqueueRun(now, e)
	case Kill:
		p.onKill(now, e)
	case KillExec:
		p.onKillExec(now, e)
	case SetConfig:
		p.onSetConfig(now, e)
	case Keys:
		p.onKeys(now, e)
	case Authenticate:
		p.onAuthenticate(now, e)
	case CreateToken:
		p.onCreateToken(now, e)
	case ListTokens:
		p.onListTokens(now, e)
	case RevokeKey:
		p.onRevokeKey(now, e)
	case ForgetWorker:
		p.onForgetWorker(now, e)
	}
}

func cloneWorker(r WorkerRecord) WorkerRecord {
	r.Tags = slices.Clone(r.Tags)
	r.Queues = slices.Clone(r.Queues)
	r.SetupsInFlight = slices.Clone(r.SetupsInFlight)
	r.Capabilities.Runners = slices.Clone(r.Capabilities.Runners)
	r.RevokedKeyIDs = slices.Clone(r.RevokedKeyIDs)
	r.PinnedTags = slices.Clone(r.PinnedTags)
	r.Extensions = slices.Clone(r.Extensions)
	r.LiveConfig = maps.Clone(r.LiveConfig)
	if r.Update != nil {
		u := *r.Update
		r.Update = &u
	}
	return r
}

// openExec tracks a delivered exec (open) until its result (closed).
func (w *worker) openExec(id string, open bool) {
	if !open {
		delete(w.openExecs, id)
		return
	}
	if w.openExecs == nil {
		w.openExecs = map[string]struct{}{}
	}
	w.openExecs[id] = struct{}{}
}
