package daemon

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// FuzzInvariants plays a random but well-behaved driver against the
// machine — polls answered with random commands or errors, work finishing
// in any order, timers firing, signals — and checks the promises that
// must hold whatever happens:
//
//   - at most one poll is parked (not cancelled, not answered);
//   - no poll is sent while every permit is taken;
//   - every exec, run and setup the machine accepted is answered (an exec
//     result or an ack) and delivered at most once: a post that failed for
//     a reason that may pass (503, no answer) is sent again, one the plane
//     refused (404) never is, none is sent while another of the same
//     outcome is in flight, and by exit 0 each was delivered or its last
//     post failed;
//   - exit 0 comes only when nothing runs, every post was answered and no
//     poll is parked;
//   - under KeepPollOnWake (half the seeds) no poll is ever abandoned and
//     none is sent while another is in flight, as a FIFO relay needs; the
//     only exception is the withdrawal when the shutdown grace expires or
//     a second signal comes;
//   - after Exit, Step returns nothing.
//
// The seed corpus runs with every `go test`; `go test -fuzz` explores more.
func FuzzInvariants(f *testing.F) {
	for seed := range uint64(64) {
		f.Add(seed, uint8(seed%4))
	}
	f.Fuzz(func(t *testing.T, seed uint64, maxInv uint8) {
		sim := newSim(seed, int(maxInv%4))
		if err := sim.run(400); err != nil {
			t.Fatalf("seed %d max_invocations %d: %v\n%s", seed, maxInv%4, err, sim.trace())
		}
	})
}

type sim struct {
	r   *rand.Rand
	m   *Machine
	cfg Config
	now time.Time

	polls     map[uint64]bool // outstanding seq → cancelled
	timers    map[TimerID]time.Time
	execs     []string // started, not finished
	runs      []string
	setup     string // the running setup's command id
	refresh   string // the setup whose capabilities are being detected
	posts     []postAnswer
	answered  map[string]int  // "exec:e1", "ack:r1" → times posted
	delivered map[string]int  // → posts answered 2xx
	inflight  map[string]bool // → a post awaits its answer
	refused   map[string]bool // → a post was answered 404
	lastOK    map[string]bool // → whether the last answered post succeeded
	accepted  map[string]bool
	exited    *Exit
	nextID    int
	log       []string
	helloOpen bool
	prev      Effect // the effect before the one being applied, in this Step
}

func newSim(seed uint64, maxInv int) *sim {
	cfg := DefaultConfig()
	cfg.Hostname = "h"
	cfg.MaxInvocations = maxInv
	cfg.KeepAliveS = []float64{-1, 0, 30}[seed%3]
	cfg.GraceS = 10
	cfg.Runners = []string{wire.RunnerProcess, wire.RunnerDocker}
	cfg.KeepPollOnWake = (seed/3)%2 == 1
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return &sim{
		r: r, cfg: cfg, now: epoch,
		m:        New(cfg, rand.New(rand.NewPCG(seed, 7))),
		polls:    map[uint64]bool{},
		timers:   map[TimerID]time.Time{},
		answered: map[string]int{}, delivered: map[string]int{}, inflight: map[string]bool{},
		refused: map[string]bool{}, lastOK: map[string]bool{},
		accepted: map[string]bool{},
	}
}

func (s *sim) trace() string {
	from := max(0, len(s.log)-40)
	return fmt.Sprint(s.log[from:])
}

func (s *sim) run(steps int) error {
	if err := s.step(Boot{}); err != nil {
		return err
	}
	for range steps {
		if s.exited != nil {
			if effs := s.m.Step(s.now, Signal{Kind: SignalTerm}); len(effs) != 0 {
				return fmt.Errorf("effects after exit: %v", effs)
			}
			return nil
		}
		ev := s.pick()
		if ev == nil {
			return fmt.Errorf("stuck: nothing can happen (status %+v)", s.m.Status())
		}
		if err := s.step(ev); err != nil {
			return err
		}
	}
	return nil
}

// pick chooses the next thing that happens among those possible now.
func (s *sim) pick() Event {
	s.now = s.now.Add(time.Duration(s.r.IntN(3000)) * time.Millisecond)
	var choices []func() Event
	if s.helloOpen {
		choices = append(choices, func() Event {
			s.helloOpen = false
			if s.r.IntN(4) == 0 {
				return HelloResult{Status: 503}
			}
			id := "w1"
			return HelloResult{Status: 200, Response: &wire.HelloResponse{WorkerID: &id}}
		})
	}
	for seq := range s.polls {
		choices = append(choices, func() Event { return s.answerPoll(seq) })
	}
	if len(s.execs) > 0 {
		choices = append(choices, func() Event {
			i := s.r.IntN(len(s.execs))
			id := s.execs[i]
			s.execs = slices.Delete(s.execs, i, i+1)
			return ExecFinished{ExecID: id, Result: wire.ExecResult{ExitCode: wire.Int(s.r.IntN(3) - 1)}}
		})
	}
	if len(s.runs) > 0 {
		choices = append(choices, func() Event {
			i := s.r.IntN(len(s.runs))
			id := s.runs[i]
			s.runs = slices.Delete(s.runs, i, i+1)
			return RunFinished{InvocationID: id, State: []string{wire.StateSucceeded, wire.StateFailed, wire.StateKilled}[s.r.IntN(3)]}
		})
	}
	if s.setup != "" {
		choices = append(choices, func() Event {
			id := s.setup
			s.setup = ""
			return SetupFinished{CommandID: id, ExitCode: s.r.IntN(2)}
		})
	}
	if s.refresh != "" {
		choices = append(choices, func() Event {
			id := s.refresh
			s.refresh = ""
			return CapabilitiesRefreshed{CommandID: id, Capabilities: wire.Capabilities{Runners: []string{wire.RunnerProcess}}}
		})
	}
	if len(s.posts) > 0 {
		choices = append(choices, func() Event {
			p := s.posts[0]
			s.posts = s.posts[1:]
			s.inflight[p.key] = false
			return p.ev
		})
	}
	if len(s.timers) > 0 {
		choices = append(choices, func() Event {
			id, at := TimerID(""), time.Time{}
			for k, v := range s.timers {
				if id == "" || v.Before(at) || v.Equal(at) && k < id {
					id, at = k, v
				}
			}
			delete(s.timers, id)
			if at.After(s.now) {
				s.now = at
			}
			return TimerFired{ID: id, At: at}
		})
	}
	if s.r.IntN(40) == 0 {
		choices = append(choices, func() Event { return Signal{Kind: SignalTerm} })
	}
	if len(choices) == 0 {
		return nil
	}
	return choices[s.r.IntN(len(choices))]()
}

func (s *sim) answerPoll(seq uint64) Event {
	delete(s.polls, seq)
	switch s.r.IntN(6) {
	case 0:
		return PollResult{Seq: seq, Status: 503}
	case 1:
		return PollResult{Seq: seq, Err: errors.New("reset")}
	}
	n := s.r.IntN(4)
	if s.r.IntN(3) == 0 {
		n = 0
	}
	var cmds []wire.Command
	for range n {
		cmds = append(cmds, s.command())
	}
	return PollResult{Seq: seq, Status: 200, Response: &wire.PollResponse{Commands: cmds}}
}

func (s *sim) command() wire.Command {
	s.nextID++
	id := fmt.Sprintf("c%d", s.nextID)
	var body interface{ MarshalMsg([]byte) ([]byte, error) }
	kind := []string{wire.KindExec, wire.KindExec, wire.KindRun, wire.KindRun, wire.KindSetup, wire.KindHibernate, wire.KindResetBackoff, "bogus"}[s.r.IntN(8)]
	switch kind {
	case wire.KindExec:
		body = &wire.Exec{ExecID: "e" + id, Command: "true"}
	case wire.KindRun:
		body = &wire.Run{InvocationID: "r" + id, RunConfig: wire.RunConfig{Runner: []string{"", "docker", "kube", "nope"}[s.r.IntN(4)]}}
	case wire.KindSetup:
		body = &wire.Setup{Script: "true", RefreshCapabilities: s.r.IntN(2) == 0}
	case wire.KindHibernate:
		body = &wire.Hibernate{UntilEpochS: wire.Number(wire.TimestampOf(s.now.Add(time.Duration(s.r.IntN(60)) * time.Second)))}
	}
	raw := []byte{0xc0}
	if body != nil {
		raw, _ = body.MarshalMsg(nil)
	}
	return wire.Command{ID: id, Kind: kind, Body: raw}
}

// step feeds ev and checks every effect against the invariants.
func (s *sim) step(ev Event) error {
	s.log = append(s.log, fmt.Sprintf("%T%+v", ev, ev))
	s.prev = nil
	for _, e := range s.m.Step(s.now, ev) {
		s.log = append(s.log, fmt.Sprintf("  %T%+v", e, e))
		if s.exited != nil {
			return fmt.Errorf("effect after Exit: %T", e)
		}
		if err := s.apply(e); err != nil {
			return err
		}
		s.prev = e
	}
	return nil
}

func (s *sim) apply(e Effect) error {
	switch e := e.(type) {
	case SendHello:
		s.helloOpen = true
	case SendPoll:
		for _, cancelled := range s.polls {
			if !cancelled {
				return errors.New("a second poll was sent while one is parked")
			}
		}
		if s.cfg.MaxInvocations > 0 && len(s.execs)+len(s.runs) >= s.cfg.MaxInvocations {
			return errors.New("poll sent with no permit free")
		}
		if s.cfg.KeepPollOnWake && len(s.polls) > 0 {
			return errors.New("keep-poll: a poll was sent while another is still in flight")
		}
		s.polls[e.Seq] = false
	case CancelPoll:
		if l, ok := s.prev.(Log); s.cfg.KeepPollOnWake && (!ok || l.Msg != "withdrawing the poll in flight") {
			return fmt.Errorf("keep-poll: poll %d abandoned outside a withdrawal", e.Seq)
		}
		if _, ok := s.polls[e.Seq]; ok {
			s.polls[e.Seq] = true
		}
	case StartExec:
		s.execs = append(s.execs, e.Exec.ExecID)
		s.accept("exec:" + e.Exec.ExecID)
	case StartRun:
		s.runs = append(s.runs, e.Run.InvocationID)
		s.accept("ack:" + e.Run.InvocationID)
	case StartSetup:
		if s.setup != "" || s.refresh != "" {
			return errors.New("two setups at once")
		}
		s.setup = e.CommandID
		s.accept("ack:" + e.Run.InvocationID)
	case RefreshCapabilities:
		s.refresh = e.CommandID
	case CancelInFlight:
		// The driver's cancellation: every running piece reports soon;
		// the random order of pick() models "soon".
	case PostExecResult:
		return s.answer("exec:"+e.ExecID, func(status int, err error) Event {
			return ResultPosted{ExecID: e.ExecID, Status: status, Err: err}
		})
	case PostAck:
		return s.answer("ack:"+e.Ack.InvocationID, func(status int, err error) Event {
			return AckPosted{InvocationID: e.Ack.InvocationID, Status: status, Err: err}
		})
	case SetTimer:
		s.timers[e.ID] = e.At
	case CancelTimer:
		delete(s.timers, e.ID)
	case Exit:
		s.exited = &e
		if e.Code == 0 {
			if n := len(s.execs) + len(s.runs) + len(s.posts); n > 0 || s.setup != "" {
				return fmt.Errorf("exit 0 with work or posts outstanding (execs %v runs %v posts %d setup %q)", s.execs, s.runs, len(s.posts), s.setup)
			}
			for seq, cancelled := range s.polls {
				if !cancelled {
					return fmt.Errorf("exit 0 with poll %d parked", seq)
				}
			}
			for k := range s.accepted {
				if s.answered[k] == 0 || s.delivered[k] == 0 && s.lastOK[k] {
					return fmt.Errorf("exit 0 but %s was posted %d times, delivered %d", k, s.answered[k], s.delivered[k])
				}
			}
		}
	}
	return nil
}

func (s *sim) accept(key string) { s.accepted[key] = true }

// answer takes a post of key and queues its answer: mostly 200, else
// 503, no answer at all, or a 404 refusal.
func (s *sim) answer(key string, answered func(status int, err error) Event) error {
	switch {
	case s.inflight[key]:
		return fmt.Errorf("%s posted while a post of it is in flight", key)
	case s.delivered[key] > 0:
		return fmt.Errorf("%s posted again after it was delivered", key)
	case s.refused[key]:
		return fmt.Errorf("%s posted again after the plane refused it", key)
	}
	s.answered[key]++
	s.inflight[key] = true
	var ev Event
	switch s.r.IntN(8) {
	case 0:
		ev, s.lastOK[key] = answered(503, errors.New("status 503")), false
	case 1:
		ev, s.lastOK[key] = answered(0, errors.New("connection reset")), false
	case 2:
		ev, s.lastOK[key], s.refused[key] = answered(404, errors.New("status 404")), false, true
	default:
		ev, s.lastOK[key] = answered(200, nil), true
		s.delivered[key]++
	}
	s.posts = append(s.posts, postAnswer{key: key, ev: ev})
	return nil
}

// postAnswer is the queued answer to one post.
type postAnswer struct {
	key string
	ev  Event
}
