package planeserver

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nymphd/nymph/wirecore/plane"
)

// message is one event for the loop, stepped at the time the loop takes
// it. A plane.Request is named id as it is stepped, and its answer goes
// to reply.
type message struct {
	ev    plane.Event
	id    plane.RequestID
	reply chan plane.Reply
	// peek, when set, runs on the loop with the core instead of an event.
	peek func(*plane.Plane)
	// done, when set, is closed once the event's group has been stored
	// and answered: a reply the group made for the request is in its
	// channel by then.
	done chan struct{}
}

// groupMax bounds how many queued events share one Store.Apply: under
// load, one durable write covers many requests.
const groupMax = 256

// errUnavailable answers requests the loop can no longer serve.
var errUnavailable = errors.New("control plane unavailable")

// Run owns the plane core until ctx is cancelled: it steps events in
// arrival order, applies each group's batch durably, and only then sends
// the group's replies. Open requests are answered 503 when it returns.
func (s *Server) Run(ctx context.Context) error {
	defer close(s.stop)
	l := &loop{
		s:       s,
		pending: map[plane.RequestID]chan plane.Reply{},
		timers:  map[plane.RequestID]*time.Timer{},
	}
	defer l.failAll("server shutting down")
	ticker := time.NewTicker(s.cfg.TickEvery)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			l.group(ctx, message{ev: plane.Tick{}})
		case m := <-s.in:
			l.group(ctx, m)
		}
	}
}

type loop struct {
	s       *Server
	pending map[plane.RequestID]chan plane.Reply
	timers  map[plane.RequestID]*time.Timer
	// batch folds the group's batches into one Apply.
	batch   plane.BatchMerger
	replies []plane.Reply
	// stepped are the done channels of the group's messages.
	stepped []chan struct{}
	// diverged is set while the core may hold changes the store refused
	// and could not be rebuilt from it: nothing is stepped (every request
	// is answered 503) until a reload succeeds, tried at each group (a
	// Tick, a request).
	diverged bool
}

// group steps first and whatever else is already queued (up to groupMax),
// persists their merged batch once, then answers.
func (l *loop) group(ctx context.Context, first message) {
	if l.diverged && !l.reload(ctx) {
		l.refuse(first)
		return
	}
	l.batch.Reset()
	l.replies = l.replies[:0]
	defer func() {
		for _, done := range l.stepped {
			close(done)
		}
		clear(l.stepped)
		l.stepped = l.stepped[:0]
	}()
	l.step(first)
	for n := 1; n < groupMax; n++ {
		select {
		case m := <-l.s.in:
			l.step(m)
			continue
		default:
		}
		break
	}
	if !l.batch.Empty() {
		start := time.Now()
		// Not cancelled by a stop: the group in flight when the stop came
		// is stored and answered like any other, not failed 503.
		err := l.s.cfg.Store.Apply(context.WithoutCancel(ctx), l.batch.Batch())
		l.s.metrics.applied(time.Since(start), err)
		if err != nil {
			l.s.log.Error("store apply failed; reloading the plane from the store", "err", err)
			l.recover(context.WithoutCancel(ctx))
			return
		}
	}
	for _, r := range l.replies {
		l.answer(r)
	}
}

func (l *loop) step(m message) {
	if m.peek != nil {
		m.peek(l.s.core)
		return
	}
	ev := m.ev
	if req, ok := ev.(plane.Request); ok {
		ev = req.Named(m.id)
		l.pending[m.id] = m.reply
	}
	if gone, ok := ev.(plane.Gone); ok {
		// A reply this group already made for the request (a parked poll
		// woken with commands) still goes to its channel: its caller
		// hears of it (done waits for the group) and hands its commands
		// back (Undelivered) rather than lose them with the connection.
		if !slices.ContainsFunc(l.replies, func(r plane.Reply) bool { return r.Req == gone.Req }) {
			delete(l.pending, gone.Req)
		}
		if t := l.timers[gone.Req]; t != nil {
			t.Stop()
			delete(l.timers, gone.Req)
		}
	}
	if m.done != nil {
		l.stepped = append(l.stepped, m.done)
	}
	now := l.s.cfg.Now()
	for _, eff := range l.s.core.Step(now, ev) {
		switch e := eff.(type) {
		case plane.Persist:
			l.batch.Merge(&e.Batch)
		case plane.Reply:
			l.replies = append(l.replies, e)
		case plane.Park:
			l.parkTimer(e.Req, e.Until.Sub(now))
		}
	}
}

func (l *loop) parkTimer(id plane.RequestID, d time.Duration) {
	if t := l.timers[id]; t != nil {
		t.Stop()
	}
	s := l.s
	l.timers[id] = time.AfterFunc(d, func() {
		m := message{ev: plane.PollDeadline{Req: id}}
		select {
		case s.in <- m:
		case <-s.stop:
		}
	})
}

func (l *loop) answer(r plane.Reply) {
	if t := l.timers[r.Req]; t != nil {
		t.Stop()
		delete(l.timers, r.Req)
	}
	ch := l.pending[r.Req]
	if ch == nil {
		return // the client left
	}
	delete(l.pending, r.Req)
	ch <- r // buffered: never blocks
}

// recover runs after a failed Apply: the core may hold changes the store
// does not, so it is rebuilt from the store, and every open request —
// including this group's — is answered 503; daemons retry.
func (l *loop) recover(ctx context.Context) {
	l.diverged = true
	l.reload(ctx)
	l.failAll("store unavailable")
}

// reload rebuilds the core from the store and reports whether it did;
// until it does, the loop steps nothing (diverged).
func (l *loop) reload(ctx context.Context) bool {
	core, err := l.s.restore(ctx)
	if err != nil {
		l.s.log.Error("reload from the store failed; answering every request 503 until it succeeds", "err", err)
		return false
	}
	if l.diverged {
		l.s.log.Info("plane reloaded from the store")
	}
	l.s.core, l.diverged = core, false
	return true
}

// refuse answers a message without stepping it, the core being one the
// store may not hold: a request 503, a status page's peek as the core
// stands.
func (l *loop) refuse(m message) {
	switch {
	case m.peek != nil:
		m.peek(l.s.core)
	case m.reply != nil:
		m.reply <- plane.Reply{Req: m.id, Status: 503, Body: plane.ErrorBody{Error: "store unavailable"}}
	}
	if m.done != nil {
		close(m.done)
	}
}

func (l *loop) failAll(msg string) {
	for id, t := range l.timers {
		t.Stop()
		delete(l.timers, id)
	}
	for id, ch := range l.pending {
		ch <- plane.Reply{Req: id, Status: 503, Body: plane.ErrorBody{Error: msg}}
		delete(l.pending, id)
	}
}

// call sends a request to the loop and waits for its reply. When the
// client goes away first, the loop is told (plane.Gone) so a parked poll
// does not take work for a daemon that is no longer listening; a reply
// the loop made before it heard of that is still returned, with the
// context's error, so the caller can hand its commands back.
func (s *Server) call(ctx context.Context, req plane.Request) (plane.RequestID, *plane.Reply, error) {
	id := plane.RequestID(s.nextID.Add(1))
	ch := make(chan plane.Reply, 1)
	select {
	case s.in <- message{ev: req, id: id, reply: ch}:
	case <-s.stop:
		return id, nil, errUnavailable
	case <-ctx.Done():
		return id, nil, ctx.Err()
	}
	select {
	case r := <-ch:
		return id, &r, nil
	case <-s.stop:
		select {
		case r := <-ch: // answered on the way out
			return id, &r, nil
		default:
			return id, nil, errUnavailable
		}
	case <-ctx.Done():
	}
	processed := make(chan struct{})
	gone := message{ev: plane.Gone{Req: id}, done: processed}
	select {
	case s.in <- gone:
		select {
		case <-processed:
		case <-s.stop:
		}
	case <-s.stop:
	}
	select {
	case r := <-ch:
		return id, &r, ctx.Err()
	default:
		return id, nil, ctx.Err()
	}
}

// undeliver tells the loop the reply to poll id never reached its daemon.
func (s *Server) undeliver(id plane.RequestID) {
	m := message{ev: plane.Undelivered{Req: id}}
	select {
	case s.in <- m:
	case <-s.stop:
	}
}

// Peek runs f on the loop goroutine with the plane core, for status pages
// and tests; f must not keep the core.
func (s *Server) Peek(ctx context.Context, f func(*plane.Plane)) error {
	done := make(chan struct{})
	m := message{peek: func(p *plane.Plane) { f(p); close(done) }}
	select {
	case s.in <- m:
	case <-s.stop:
		return errUnavailable
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-s.stop:
		return errUnavailable
	case <-ctx.Done():
		return ctx.Err()
	}
}
