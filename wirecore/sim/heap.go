package sim

// event is one scheduled happening. It is a small value without
// pointers, so the heap is one flat slice: a 100,000-daemon fleet keeps a
// few hundred thousand of them pending and the collector has nothing in
// them to chase.
type event struct {
	at   int64  // virtual nanoseconds since the start
	seq  uint64 // scheduling order: breaks ties deterministically
	ref  uint64 // a request id, a slab reference, a timer's At, …
	d    int32  // the daemon the event is for, when it is for one
	kind kind
	aux  uint8 // a timer index, a wave index, …
}

type kind uint8

const (
	evBoot         kind = iota + 1 // daemon d boots
	evTimer                        // daemon d's timer aux fires (ref: its At)
	evArrive                       // request ref reaches the plane
	evReply                        // the answer to request ref reaches daemon d
	evDeadline                     // the Park of request ref is due
	evGone                         // the plane hears that request ref's client left
	evUndelivered                  // the plane hears that the reply to ref was not delivered
	evTimeout                      // request ref's client gives up waiting
	evFeed                         // an answer the driver feeds back at once (ref: request)
	evExecDone                     // running exec ref (slab) finishes
	evSetupDone                    // running setup ref (slab) finishes
	evArrival                      // the next operator exec arrives (ref: arrival generation)
	evSetupArrival                 // the next operator setup arrives
	evRate                         // the exec arrival rate changes (a burst starts or ends)
	evTick                         // the plane's clock tick
	evSample                       // a metrics sample is due
	evOutage                       // plane outage aux starts (ref 1) or ends (ref 0)
	evPartition                    // partition aux starts (ref 1) or ends (ref 0)
	evHibernate                    // hibernate wave aux
	evDrain                        // drain wave aux
)

// queue is a binary min-heap of events by (at, seq). Hand-written rather
// than container/heap, whose interface methods box every element.
type queue struct {
	ev  []event
	seq uint64
}

func (q *queue) len() int { return len(q.ev) }

func less(a, b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (q *queue) push(e event) {
	q.seq++
	e.seq = q.seq
	q.ev = append(q.ev, e)
	i := len(q.ev) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(&q.ev[i], &q.ev[p]) {
			break
		}
		q.ev[i], q.ev[p] = q.ev[p], q.ev[i]
		i = p
	}
}

func (q *queue) pop() event {
	top := q.ev[0]
	n := len(q.ev) - 1
	q.ev[0] = q.ev[n]
	q.ev = q.ev[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && less(&q.ev[r], &q.ev[l]) {
			m = r
		}
		if !less(&q.ev[m], &q.ev[i]) {
			break
		}
		q.ev[i], q.ev[m] = q.ev[m], q.ev[i]
		i = m
	}
	return top
}
