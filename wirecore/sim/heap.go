package sim

import "math/bits"

// event is one scheduled happening. It is a small value without
// pointers, so the heap is one flat slice: a 100,000-daemon fleet keeps a
// few hundred thousand of them pending and the collector has nothing in
// them to chase.
type event struct {
	at   int64  // virtual nanoseconds since the start
	seq  uint64 // its creator's origin and scheduling order: breaks ties deterministically
	ref  uint64 // a request id, a slab reference, a timer's At, …
	d    int32  // the daemon the event is for, when it is for one
	kind kind
	aux  uint8 // a timer index, a wave index, …
}

type kind uint8

const (
	evBoot         kind = iota + 1 // daemon d boots
	evTimer                        // daemon d's timer aux fires (ref: its At)
	evDeadline                     // the Park of request ref is due
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
	evMail                         // mail ref (inbox slab) from the other side is due
)

// queue holds the pending events in (at, seq) order. It is a calendar
// queue: a 100,000-daemon fleet keeps a few hundred thousand events
// pending, and a binary heap of them costs a pop about a dozen cache
// misses down its lower levels, which was most of the sim's own time.
// Here the events of the next ~69 s sit unsorted in buckets of ~1 ms
// (bucketShift); only the current bucket is a heap, small and hot, and
// what lies past the horizon waits in an overflow heap. The order handed
// out is exactly the heap's, so runs are unchanged.
type queue struct {
	// origin is or-ed into the sequence numbers of the events pushed
	// here; a mail keeps its sender's, so ties between the two sides
	// fall the same way however their steps interleave.
	origin uint64
	seq    uint64
	n      int
	// cur holds every event of bucket curB or earlier, as a heap.
	cur  eventHeap
	curB int64
	// ring[b&ringMask] holds the events of bucket b, curB < b <
	// curB+ringSize, in no order; ringN counts them.
	ring  [ringSize][]event
	ringN int
	// used has bit b&ringMask set while ring[b&ringMask] holds events,
	// so a sparse fleet skips its empty buckets a word at a time.
	used [ringSize / 64]uint64
	// far holds the events of bucket curB+ringSize and later.
	far eventHeap
}

const (
	bucketShift = 22 // 2^22 ns ≈ 4.2 ms a bucket
	ringSize    = 1 << 14
	ringMask    = ringSize - 1
	// keptBucket bounds the storage a drained bucket keeps for reuse: a
	// wave that put the whole fleet in one bucket does not pin its array.
	keptBucket = 4096
)

func bucketOf(at int64) int64 { return at >> bucketShift }

func (q *queue) len() int { return q.n }

func (q *queue) push(e event) {
	q.seq++
	e.seq = q.origin | q.seq
	q.pushSeq(e)
}

// pushSeq queues e with the sequence number it carries.
func (q *queue) pushSeq(e event) {
	q.n++
	switch b := bucketOf(e.at); {
	case b <= q.curB:
		q.cur.push(e)
	case b < q.curB+ringSize:
		q.toRing(b, e)
	default:
		q.far.push(e)
	}
}

// peek is the next event; the queue must not be empty.
func (q *queue) peek() *event {
	for len(q.cur) == 0 {
		q.advance()
	}
	return &q.cur[0]
}

// pop removes and returns the next event; the queue must not be empty.
func (q *queue) pop() event {
	q.peek()
	q.n--
	return q.cur.pop()
}

// advance moves to the next bucket (straight to the overflow's first
// when the ring is empty) and makes it the current heap.
func (q *queue) advance() {
	if q.ringN == 0 {
		q.curB = bucketOf(q.far[0].at)
	} else {
		q.curB = q.nextUsed()
	}
	for len(q.far) > 0 && bucketOf(q.far[0].at) < q.curB+ringSize {
		e := q.far.pop()
		q.toRing(bucketOf(e.at), e)
	}
	i := q.curB & ringMask
	slot := &q.ring[i]
	if len(*slot) == 0 {
		return
	}
	q.used[i/64] &^= 1 << (i % 64)
	q.cur = append(q.cur, *slot...)
	q.ringN -= len(*slot)
	if cap(*slot) > keptBucket {
		*slot = nil
	} else {
		*slot = (*slot)[:0]
	}
	q.cur.init()
}

func (q *queue) toRing(b int64, e event) {
	i := b & ringMask
	q.ring[i] = append(q.ring[i], e)
	q.used[i/64] |= 1 << (i % 64)
	q.ringN++
}

// nextUsed is the first bucket after curB whose slot holds events; the
// ring must not be empty.
func (q *queue) nextUsed() int64 {
	from := (q.curB + 1) & ringMask
	w, bit := from/64, from%64
	if m := q.used[w] >> bit; m != 0 {
		return q.curB + 1 + int64(bits.TrailingZeros64(m))
	}
	for k := int64(1); k <= ringSize/64; k++ {
		if m := q.used[(w+k)%(ringSize/64)]; m != 0 {
			return q.curB + 1 + (64 - bit) + (k-1)*64 + int64(bits.TrailingZeros64(m))
		}
	}
	panic("sim: queue: ring counted events but holds none")
}

// eventHeap is a binary min-heap of events by (at, seq). Hand-written
// rather than container/heap, whose interface methods box every element.
type eventHeap []event

func less(a, b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !less(&a[i], &a[p]) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	*h = a[:n]
	a.down(0, n)
	return top
}

// down sifts element i of the first n toward the leaves.
func (h eventHeap) down(i, n int) {
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && less(&h[r], &h[l]) {
			m = r
		}
		if !less(&h[m], &h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// init orders a heap built by appending.
func (h eventHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i, len(h))
	}
}
