package daemon

import (
	"log/slog"
	"reflect"
	"slices"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// Machine is the daemon's state machine. Create it with New; feed it with
// Step. It is not safe for concurrent use.
type Machine struct {
	// cfg comes first: its poll settings, at its end, then sit next to
	// the fields a poll's turn of the loop touches, which follow. A
	// driver of a whole fleet (the simulator) steps each machine once in
	// a while, so each cache line these span is a miss; keep hot fields
	// together and the rare ones below.
	cfg Config

	// The poll loop's fields.
	out           []Effect
	state         string
	booted        bool
	exited        bool
	workerID      string
	helloInFlight bool
	// needHello: the next attempt after a backoff is a hello, not a poll
	// (at boot, and after a poll answered 404 unknown_worker).
	needHello bool
	pollSeq   uint64
	// parked is the Seq of the poll the loop waits on; 0 when none. A
	// cancelled poll is no longer parked, but its result is still read
	// for the commands it may carry.
	parked uint64
	// agreed are the extensions the plane's last hello reply agreed to.
	agreed wire.ExtSet
	// cursor is the last command cursor applied; applied the ids of the
	// commands applied most recently (extension wire.ExtCursor), and
	// appliedDirty says they changed since PersistDelivery.
	cursor       uint64
	cursorWire   *string // cursor as the wire carries it (setCursor)
	appliedDirty bool
	draining     bool
	// noticing is true while a NotifyDraining is in flight.
	noticing bool
	execs    []execEntry // started, in start order
	runs     []runEntry  // started, in start order
	held     []heldWork  // waiting for a permit, in arrival order

	setups                   []wire.SetupCommand // waiting for the serial setup slot
	setup                    *wire.SetupCommand  // in the slot (running or refreshing)
	refreshing               bool
	pendingCaps              *wire.Capabilities // to ship as updated_capabilities
	capsFirstSeq             uint64             // first poll that carried pendingCaps; 0: not sent yet
	capsGen                  uint64             // counts refreshes: pendingCaps's generation
	outbox                   []*outgoing        // outcomes being posted, or waiting to be sent again
	idleSince                time.Time
	lastPollAt, lastPollOKAt time.Time
	counters                 Counters

	rnd     Rand
	backoff backoff
	// retryAfter is the failed answer's Retry-After, for the next
	// scheduleRetry.
	retryAfter time.Duration

	timers [timerCount]time.Time // zero: not armed

	hibernateTill time.Time

	signals     int
	drainReason string
	cancelled   bool // CancelInFlight was decided
	// fetchingOTA is the command id of the update being downloaded;
	// updating, of the update whose drain ends in ApplyOTA (its version
	// in updateVersion) rather than in Exit.
	fetchingOTA, updating, updateVersion string
	applying                             bool // ApplyOTA emitted, OTAApplied not yet seen

	applied idRing
	// logLevel is the level the plane last set (extension wire.ExtConfig);
	// "" until it sets one. configuredAt keeps the live-settable values
	// as configured, for a key the plane stops setting.
	logLevel     wire.LogLevel
	configuredAt bootValues
	// cancelReasons are the reasons of cancels sent to running work, by
	// exec or invocation id, until its end is reported.
	cancelReasons map[string]string
}

type execEntry struct{ id string }

type runEntry struct {
	id      string
	started time.Time
}

func (e execEntry) entryID() string { return e.id }
func (e runEntry) entryID() string  { return e.id }

// heldWork is an exec or a run received while no permit was free.
type heldWork struct {
	commandID string
	isExec    bool
	exec      wire.Exec // when isExec
	run       wire.Run  // otherwise
	kind      string    // resolved runner kind of run
}

const timerCount = len(Timers)

// New returns a machine in state booting. cfg is copied; WaitMaxS,
// RetryMinS and RetryMaxS get their defaults when not positive, and
// RetryMaxS is raised to RetryMinS when below it.
func New(cfg Config, rnd Rand) *Machine {
	if cfg.WaitMaxS <= 0 {
		cfg.WaitMaxS = DefaultWaitMaxS
	}
	if cfg.RetryMinS <= 0 {
		cfg.RetryMinS = DefaultRetryMinS
	}
	if cfg.RetryMaxS <= 0 {
		cfg.RetryMaxS = DefaultRetryMaxS
	}
	cfg.RetryMaxS = max(cfg.RetryMaxS, cfg.RetryMinS)
	if cfg.DefaultRunner == "" {
		cfg.DefaultRunner = DefaultRunner
	}
	cfg.Tags = slices.Clone(cfg.Tags)
	cfg.Lanes = slices.Clone(cfg.Lanes)
	cfg.Runners = slices.Clone(cfg.Runners)
	applied := newIDRing(cfg.Applied)
	cfg.Applied = nil // kept in the machine's ring
	m := &Machine{
		cfg:     cfg,
		rnd:     rnd,
		state:   StateBooting,
		backoff: newBackoff(cfg.RetryMinS, cfg.RetryMaxS),
		applied: applied,
		configuredAt: bootValues{WaitMaxS: cfg.WaitMaxS, RetryMinS: cfg.RetryMinS, RetryMaxS: cfg.RetryMaxS,
			MaxInvocations: cfg.MaxInvocations, LogLevel: cfg.LogLevel},
	}
	m.setCursor(cfg.Cursor)
	return m
}

// Step applies one event that happened at now and returns the effects the
// driver must carry out, in order. The returned slice is valid until the
// next call to Step. After Exit, Step returns nothing.
func (m *Machine) Step(now time.Time, ev Event) []Effect {
	clear(m.out)
	m.out = m.out[:0]
	return m.step(now, ev)
}

// StepInto is Step that appends the effects to buf and returns it: for
// a driver of many machines (the simulator), which keeps one buffer for
// all of them rather than one per machine. The machine keeps no hold of
// buf after it returns.
func (m *Machine) StepInto(buf []Effect, now time.Time, ev Event) []Effect {
	saved := m.out
	m.out = buf
	out := m.step(now, ev)
	m.out = saved
	return out
}

func (m *Machine) step(now time.Time, ev Event) []Effect {
	if m.exited {
		return m.out // nothing added
	}
	if _, ok := ev.(Boot); !ok && !m.booted {
		// reflect rather than fmt's %T: fmt would make every event
		// escape, and so cost each Step an allocation to box it.
		m.log(slog.LevelWarn, "event before boot ignored", slog.String("event", reflect.TypeOf(ev).String()))
		return m.out
	}
	switch e := ev.(type) {
	case Boot:
		m.boot(now)
	case HelloResult:
		m.onHello(now, e)
	case PollResult:
		m.onPoll(now, e)
	case ExecFinished:
		m.onExecFinished(now, e)
	case RunFinished:
		m.onRunFinished(now, e)
	case SetupFinished:
		m.onSetupFinished(now, e)
	case CapabilitiesRefreshed:
		m.onCapabilities(now, e)
	case TimerFired:
		m.onTimer(now, e)
	case Signal:
		m.onSignal(now, e)
	case AckPosted:
		m.onPosted(now, "ack", e.InvocationID, e.Status, e.Err, &m.counters.AcksFailed)
	case ResultPosted:
		m.onPosted(now, "exec result", e.ExecID, e.Status, e.Err, &m.counters.ResultsFailed)
	case KeyRevoked:
		m.onKeyRevoked(e)
	case OTAFetched:
		m.onOTAFetched(now, e)
	case DrainNoticed:
		m.noticing = false
		m.checkDrained()
	case OTAApplied:
		m.onOTAApplied(now, e)
	}
	return m.out
}

// Status returns a snapshot of the machine's state.
func (m *Machine) Status() Status {
	free := -1
	if m.cfg.MaxInvocations > 0 {
		free = m.cfg.MaxInvocations - len(m.execs) - len(m.runs)
	}
	return Status{
		State:         m.state,
		WorkerID:      m.workerID,
		Queue:         m.cfg.Queue,
		ExecsRunning:  len(m.execs),
		RunsRunning:   len(m.runs),
		Held:          len(m.held),
		SetupsQueued:  len(m.setups),
		SetupRunning:  m.setup != nil,
		PostsPending:  len(m.outbox),
		PermitsFree:   free,
		BackoffBaseS:  m.backoff.base,
		LastPollAt:    m.lastPollAt,
		LastPollOKAt:  m.lastPollOKAt,
		Counters:      m.counters,
		HibernateTill: m.hibernateTill,
	}
}

// ---------------------------------------------------------------- small pieces

func (m *Machine) emit(e Effect) { m.out = append(m.out, e) }

func (m *Machine) setState(s string) {
	if m.state == s {
		return
	}
	m.state = s
	m.emit(ReportState{State: s})
}

func (m *Machine) log(level slog.Level, msg string, attrs ...slog.Attr) {
	m.emit(Log{Level: level, Msg: msg, Attrs: attrs})
}

func (m *Machine) permitFree() bool {
	return m.cfg.MaxInvocations <= 0 || len(m.execs)+len(m.runs) < m.cfg.MaxInvocations
}

func (m *Machine) execKnown(id string) bool {
	if slices.ContainsFunc(m.execs, func(x execEntry) bool { return x.id == id }) {
		return true
	}
	return slices.ContainsFunc(m.held, func(h heldWork) bool { return h.isExec && h.exec.ExecID == id })
}

func (m *Machine) runKnown(id string) bool {
	if slices.ContainsFunc(m.runs, func(x runEntry) bool { return x.id == id }) {
		return true
	}
	return slices.ContainsFunc(m.held, func(h heldWork) bool { return !h.isExec && h.run.InvocationID == id })
}

// bootValues are the live-settable settings as the daemon was configured.
type bootValues struct {
	WaitMaxS, RetryMinS, RetryMaxS float64
	MaxInvocations                 int
	LogLevel                       wire.LogLevel
}

func (m *Machine) execRunning(id string) bool {
	return slices.ContainsFunc(m.execs, func(x execEntry) bool { return x.id == id })
}

func (m *Machine) runRunning(id string) bool {
	return slices.ContainsFunc(m.runs, func(x runEntry) bool { return x.id == id })
}

func is2xx(status int) bool { return status >= 200 && status <= 299 }

// retryableStatus: a hello that failed this way may succeed later.
func retryableStatus(status int) bool {
	return status >= 500 || status == 408 || status == 429
}
