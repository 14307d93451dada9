package vc

import (
	"net/http"
	"strconv"
	"sync"
)

// A hold catches the next calls of one method (CloneVM_Task, ReconfigVM_Task, ...) when gpusim receives
// them, before any object is locked: it counts them as started, so a test sees the step begin in the
// simulator itself, and keeps the call waiting (its task not yet created) until it is released; reads of
// the object go on meanwhile. A hold on a host's queue (`host`) catches the method on whichever VM of that
// host it is called, VMs made after the hold was armed included: `{"host": "esx-01.gpu.sim", "method":
// "PowerOnVM_Task"}` stops the host's power-on queue at its next power-on, while every session (the caller's
// too) reads and changes everything else. Control routes:
//
//	POST   /gpusim/holds               {"object": "vm-42" | name | "" (any), "method": "ReconfigVM_Task", "count": 1}
//	                                   or {"host": "esx-01.gpu.sim", "method": "PowerOnVM_Task", "count": 1}
//	GET    /gpusim/holds               every hold with how many tasks started and which objects
//	POST   /gpusim/holds/{id}/release  lets its waiting tasks (and later ones) run
//	DELETE /gpusim/holds               releases every hold
type hold struct {
	ID      int      `json:"id"`
	Object  string   `json:"object,omitempty"` // moref value; "" catches the method on any object
	Name    string   `json:"name,omitempty"`
	Host    string   `json:"host,omitempty"` // a host's queue: the method on any VM of this host (by name)
	Method  string   `json:"method"`
	Count   int      `json:"count"`   // tasks it still catches
	Started []string `json:"started"` // moref values of the tasks caught, in order
	Waiting int      `json:"waiting"` // caught tasks still held
	Free    bool     `json:"released"`

	release chan struct{}
}

type holdBook struct {
	mu    sync.Mutex
	next  int
	holds []*hold
}

func newHoldBook() *holdBook { return &holdBook{} }

func (b *holdBook) add(h *hold) hold {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	h.ID, h.release, h.Started = b.next, make(chan struct{}), []string{}
	b.holds = append(b.holds, h)
	return *h
}

// catch takes one count of the first unreleased hold matching (object, method), or (the object's host,
// method) for a hold on a host's queue; nil when none does.
func (b *holdBook) catch(object, host, method string) *hold {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range b.holds {
		if h.Free || h.Count <= 0 || h.Method != method || !h.matches(object, host) {
			continue
		}
		h.Count--
		h.Started = append(h.Started, object)
		h.Waiting++
		return h
	}
	return nil
}

func (h *hold) matches(object, host string) bool {
	if h.Host != "" {
		return h.Host == host
	}
	return h.Object == "" || h.Object == object
}

// wait blocks a call of method on object (a VM of host, or "") while a hold catches it.
func (b *holdBook) wait(object, host, method string) {
	h := b.catch(object, host, method)
	if h == nil {
		return
	}
	<-h.release
	b.mu.Lock()
	h.Waiting--
	b.mu.Unlock()
}

func (b *holdBook) free(id int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range b.holds {
		if h.ID == id || id == 0 {
			if !h.Free {
				h.Free = true
				close(h.release)
			}
			if id != 0 {
				return true
			}
		}
	}
	return id == 0
}

func (b *holdBook) list() []hold {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]hold, 0, len(b.holds))
	for _, h := range b.holds {
		c := *h
		c.Started = append([]string{}, h.Started...)
		out = append(out, c)
	}
	return out
}

type holdRequest struct {
	Object string `json:"object"`
	Host   string `json:"host"`
	Method string `json:"method"`
	Count  int    `json:"count"`
}

func (s *Sim) registerHolds() {
	s.HandleControl("POST /gpusim/holds", s.armHold)
	s.HandleControl("GET /gpusim/holds", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]any{"holds": s.faults.holds.list()})
	})
	s.HandleControl("DELETE /gpusim/holds", func(w http.ResponseWriter, r *http.Request) {
		s.faults.holds.free(0)
		WriteJSON(w, http.StatusOK, map[string]any{"released": true})
	})
	s.HandleControl("POST /gpusim/holds/{id}/release", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.Atoi(r.PathValue("id"))
		if err != nil || id <= 0 || !s.faults.holds.free(id) {
			WriteError(w, http.StatusBadRequest, "unknown hold %q", r.PathValue("id"))
			return
		}
		WriteJSON(w, http.StatusOK, map[string]any{"id": id, "released": true})
	})
}

func (s *Sim) armHold(w http.ResponseWriter, r *http.Request) {
	var req holdRequest
	if err := DecodeJSON(r, &req); err != nil {
		WriteError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if req.Method == "" {
		WriteError(w, http.StatusBadRequest, "method is required (e.g. ReconfigVM_Task)")
		return
	}
	if req.Count < 0 {
		WriteError(w, http.StatusBadRequest, "count must not be negative")
		return
	}
	if req.Count == 0 {
		req.Count = 1
	}
	if req.Object != "" && req.Host != "" {
		WriteError(w, http.StatusBadRequest, "give object or host, not both")
		return
	}
	h := &hold{Name: req.Object, Method: req.Method, Count: req.Count}
	if req.Host != "" {
		ref, ok := s.ResolveObject(req.Host)
		if !ok || s.hostRefs[ref] == "" {
			WriteError(w, http.StatusBadRequest, "unknown host %q", req.Host)
			return
		}
		h.Host = s.hostRefs[ref]
	}
	if req.Object != "" {
		ref, ok := s.ResolveObject(req.Object)
		if !ok {
			WriteError(w, http.StatusBadRequest, "unknown object %q", req.Object)
			return
		}
		h.Object = ref.Value
	}
	WriteJSON(w, http.StatusOK, s.faults.holds.add(h))
}
