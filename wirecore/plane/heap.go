package plane

// ordered values order themselves: before is true when the value comes
// first.
type ordered[T any] interface{ before(T) bool }

// The values the plane's heaps hold; asserted, as the checker of unused
// code does not follow calls through a type parameter.
var (
	_ ordered[deadline] = deadline{}
	_ ordered[stamp]    = stamp{}
)

// minHeap is a binary min-heap of ordered values.
// It is sifted by hand rather than through container/heap, whose
// interface would box every value pushed: one allocation per parked poll
// or started run.
type minHeap[T ordered[T]] []T

func (h *minHeap[T]) push(v T) {
	*h = append(*h, v)
	a := *h
	for i := len(a) - 1; i > 0; {
		parent := (i - 1) / 2
		if !a[i].before(a[parent]) {
			break
		}
		a[i], a[parent] = a[parent], a[i]
		i = parent
	}
}

func (h *minHeap[T]) pop() T {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	var zero T
	a[last] = zero // no pointer kept past the length
	*h = a[:last]
	h.down(0)
	return top
}

// down sifts element i toward the leaves until its children are later.
func (h minHeap[T]) down(i int) {
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].before(h[m]) {
			m = l
		}
		if r < len(h) && h[r].before(h[m]) {
			m = r
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// init orders a heap built by appending.
func (h minHeap[T]) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}
