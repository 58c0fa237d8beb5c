package daemonloop

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// plane is a small control plane that speaks protocol "1": it answers
// hello, parks polls until a command is queued, and records what the
// daemon posts. It serves over HTTP (ServeHTTP) and in process
// (RoundTrip), so the end-to-end tests and the benchmark share it.
type plane struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change

	// helloReply, when set, answers hello instead of the default welcome.
	helloReply func(wire.HelloRequest) (int, []byte)
	// serial hands out the next exec only once the previous one's result
	// arrived: back-to-back execs, one at a time.
	serial      bool
	outstanding int
	// maxPark bounds how long a poll is parked (the plane's own cap).
	maxPark time.Duration
	// onPoll is called as each poll arrives (wake-latency measurement).
	onPoll func()
	// onResult is called with p.mu held as each exec result arrives, with
	// the number of results so far.
	onResult func(n int)
	// overtakeHandsOff models a plane that answered a parked poll with
	// commands just as the daemon replaced it: a poll takes what is queued
	// when it arrives, and while parked only what a newer poll hands it
	// (everything queued) as it arrives; a parked poll does not notice its
	// client going away, and RoundTrip drops the reply of a cancelled
	// request, as HTTP would.
	overtakeHandsOff bool
	handOff          *[]wire.Command // the parked poll's mailbox
	// keepOvertaken leaves an overtaken poll parked (a plane that does not
	// answer it early); parkedNow and parkedMax count parked polls.
	keepOvertaken        bool
	parkedNow, parkedMax int

	// pollGen numbers polls: a daemon parks one poll at a time, so a poll
	// overtaken by a newer one was abandoned and must not take commands
	// (over HTTP its answer could be lost with the cancelled request).
	// failResults answers the first exec result posts with these statuses
	// (0: the connection is dropped without an answer); resultPosts
	// counts every result post, failed or not.
	failResults []int
	resultPosts int

	pollGen int
	hellos  []wire.HelloRequest
	polls   []polled
	queue   []wire.Command
	results map[string]wire.ExecResult
	chunks  map[string][]byte
	acks    []wire.Ack
}

type polled struct {
	at  time.Time
	req wire.PollRequest
}

func newPlane() *plane {
	return &plane{changed: make(chan struct{}), results: map[string]wire.ExecResult{},
		chunks: map[string][]byte{}, maxPark: 20 * time.Second}
}

// signal wakes parked polls and waiters; p.mu must be held.
func (p *plane) signal() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// push queues commands for the next polls.
func (p *plane) push(cmds ...wire.Command) {
	p.mu.Lock()
	p.queue = append(p.queue, cmds...)
	p.signal()
	p.mu.Unlock()
}

// snapshot runs f under the lock.
func (p *plane) snapshot(f func(*plane)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func cmd(id, kind string, body msgp.Marshaler) wire.Command {
	b, err := body.MarshalMsg(nil)
	if err != nil {
		panic(err)
	}
	return wire.Command{ID: id, Kind: kind, Body: b}
}

func (p *plane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	status, reply := p.handle(r.Context(), r.URL.Path, body)
	if status == 0 {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close() // no answer at all
			return
		}
		status = http.StatusBadGateway
	}
	w.Header().Set("Content-Type", wire.ContentTypeMsgpack)
	w.WriteHeader(status)
	w.Write(reply)
}

// CanWithdraw: the plane stands for direct HTTP, where a cancelled request
// is withdrawn.
func (*plane) CanWithdraw() bool { return true }

// RoundTrip makes the plane a transport.Transport, without HTTP.
func (p *plane) RoundTrip(ctx context.Context, req *transport.Request) (*transport.Response, error) {
	path := req.Endpoint
	if u, err := url.Parse(req.Endpoint); err == nil && u.Scheme != "" {
		path = u.Path
	}
	status, body := p.handle(ctx, path, req.Body)
	if status == 499 || (p.overtakeHandsOff && ctx.Err() != nil) {
		return nil, ctx.Err() // the reply is lost with the request
	}
	return &transport.Response{Status: status, ContentType: wire.ContentTypeMsgpack, Body: body}, nil
}

func (p *plane) handle(ctx context.Context, path string, body []byte) (int, []byte) {
	switch {
	case path == wire.PathHello:
		var req wire.HelloRequest
		if _, err := req.UnmarshalMsg(body); err != nil {
			return 400, nil
		}
		p.mu.Lock()
		p.hellos = append(p.hellos, req)
		reply := p.helloReply
		p.signal()
		p.mu.Unlock()
		if reply != nil {
			return reply(req)
		}
		id := "w-1"
		b, _ := (&wire.HelloResponse{WorkerID: &id, SessionTTLS: 86400}).MarshalMsg(nil)
		return 200, b
	case path == wire.PathPoll:
		var req wire.PollRequest
		if _, err := req.UnmarshalMsg(body); err != nil {
			return 400, nil
		}
		return p.poll(ctx, req)
	case path == wire.PathAck:
		var ack wire.Ack
		if _, err := ack.UnmarshalMsg(body); err != nil {
			return 400, nil
		}
		p.mu.Lock()
		p.acks = append(p.acks, ack)
		p.signal()
		p.mu.Unlock()
		return 200, []byte{0x80}
	case strings.HasPrefix(path, "/v1/daemon/exec/"):
		rest := strings.TrimPrefix(path, "/v1/daemon/exec/")
		id, what, _ := strings.Cut(rest, "/")
		p.mu.Lock()
		defer p.mu.Unlock()
		defer p.signal()
		switch what {
		case "chunk":
			p.chunks[id] = append(p.chunks[id], body...)
			return 200, nil
		case "result":
			p.resultPosts++
			if len(p.failResults) > 0 {
				status := p.failResults[0]
				p.failResults = p.failResults[1:]
				return status, nil
			}
			var res wire.ExecResult
			if _, err := res.UnmarshalMsg(body); err != nil {
				return 400, nil
			}
			p.results[id] = res
			p.outstanding--
			if p.onResult != nil {
				p.onResult(len(p.results))
			}
			return 200, []byte{0x80}
		}
	}
	return 404, nil
}

func (p *plane) poll(ctx context.Context, req wire.PollRequest) (int, []byte) {
	if p.onPoll != nil {
		p.onPoll()
	}
	p.mu.Lock()
	p.polls = append(p.polls, polled{at: time.Now(), req: req})
	if p.overtakeHandsOff {
		return p.pollHandingOff(req)
	}
	p.pollGen++
	gen := p.pollGen
	p.parkedNow++
	p.parkedMax = max(p.parkedMax, p.parkedNow)
	p.signal()
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.parkedNow--
		p.mu.Unlock()
	}()
	park := min(time.Duration(float64(req.TimeoutS)*float64(time.Second)), p.maxPark)
	timer := time.NewTimer(park)
	defer timer.Stop()
	for {
		p.mu.Lock()
		var out []wire.Command
		switch {
		case gen != p.pollGen && !p.keepOvertaken:
			out = []wire.Command{}
		case p.serial && p.outstanding == 0 && len(p.queue) > 0:
			out, p.queue = p.queue[:1], p.queue[1:]
			p.outstanding++
		case !p.serial && len(p.queue) > 0:
			out, p.queue = p.queue, nil
		}
		ch := p.changed
		p.mu.Unlock()
		if out != nil {
			b, _ := (&wire.PollResponse{Commands: out}).MarshalMsg(nil)
			return 200, b
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 499, nil
		case <-timer.C:
			b, _ := (&wire.PollResponse{Commands: []wire.Command{}}).MarshalMsg(nil)
			return 200, b
		}
	}
}

// pollHandingOff is poll under overtakeHandsOff; p.mu is held on entry.
func (p *plane) pollHandingOff(req wire.PollRequest) (int, []byte) {
	reply := func(cmds []wire.Command) (int, []byte) {
		b, _ := (&wire.PollResponse{Commands: cmds}).MarshalMsg(nil)
		return 200, b
	}
	if p.handOff != nil {
		*p.handOff, p.queue = append([]wire.Command{}, p.queue...), nil
	}
	p.handOff = nil
	if len(p.queue) > 0 {
		out := p.queue
		p.queue = nil
		p.signal()
		p.mu.Unlock()
		return reply(out)
	}
	var mine []wire.Command
	p.handOff = &mine
	p.signal()
	p.mu.Unlock()
	timer := time.NewTimer(min(time.Duration(float64(req.TimeoutS)*float64(time.Second)), p.maxPark))
	defer timer.Stop()
	for {
		p.mu.Lock()
		got, ch := mine, p.changed
		p.mu.Unlock()
		if got != nil {
			return reply(got)
		}
		select {
		case <-ch:
		case <-timer.C:
			p.mu.Lock()
			if p.handOff == &mine {
				p.handOff = nil
			}
			p.mu.Unlock()
			return reply([]wire.Command{})
		}
	}
}

// waitUntil blocks until cond holds under the plane's lock; it wakes on
// every change instead of polling, so it adds no delay of its own.
func (p *plane) waitUntil(cond func(*plane) bool) {
	for {
		p.mu.Lock()
		ok := cond(p)
		ch := p.changed
		p.mu.Unlock()
		if ok {
			return
		}
		<-ch
	}
}
