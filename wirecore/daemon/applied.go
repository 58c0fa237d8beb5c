package daemon

// idRing is a bounded set of command ids: the oldest goes when a new one
// comes past MaxApplied.
type idRing struct {
	order []string
	next  int
	set   map[string]struct{}
}

func newIDRing(ids []string) idRing {
	r := idRing{set: map[string]struct{}{}}
	for _, id := range ids[max(0, len(ids)-MaxApplied):] {
		r.add(id)
	}
	return r
}

func (r *idRing) has(id string) bool {
	_, ok := r.set[id]
	return ok
}

func (r *idRing) add(id string) {
	if r.set == nil {
		r.set = map[string]struct{}{}
	}
	if r.has(id) {
		return
	}
	if len(r.order) < MaxApplied {
		r.order = append(r.order, id)
	} else {
		delete(r.set, r.order[r.next])
		r.order[r.next] = id
		r.next = (r.next + 1) % MaxApplied
	}
	r.set[id] = struct{}{}
}

// list is the ids oldest first.
func (r *idRing) list() []string {
	out := make([]string, 0, len(r.order))
	out = append(out, r.order[r.next:]...)
	return append(out, r.order[:r.next]...)
}
