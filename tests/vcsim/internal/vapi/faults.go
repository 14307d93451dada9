package vapi

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Fault makes matching REST requests fail: Method ("" = any) and a path prefix; Count answers (0 = until
// cleared) with Status and a vCenter-shaped error body.
type Fault struct {
	Method  string `json:"method"`
	Path    string `json:"path"`
	Status  int    `json:"status"`
	Count   int    `json:"count"`
	Message string `json:"message"`
}

// ServeFaults is the control route: POST arms a fault (JSON Fault), GET lists them, DELETE clears them.
func (h *Handler) ServeFaults(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch r.Method {
	case http.MethodPost:
		var f Fault
		if err := json.NewDecoder(r.Body).Decode(&f); err != nil || f.Status < 400 || f.Status > 599 || f.Path == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "a fault needs path and a status 400..599"})
			return
		}
		h.faults = append(h.faults, &f)
		writeJSON(w, http.StatusOK, map[string]any{"faults": h.faults})
	case http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{"faults": h.faults})
	case http.MethodDelete:
		h.faults = nil
		writeJSON(w, http.StatusOK, map[string]any{"faults": []*Fault{}})
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// take returns the first armed fault matching the request and counts it down.
func (h *Handler) take(r *http.Request) *Fault {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, f := range h.faults {
		if (f.Method == "" || strings.EqualFold(f.Method, r.Method)) && strings.HasPrefix(r.URL.Path, f.Path) {
			hit := *f
			if f.Count > 0 {
				f.Count--
				if f.Count == 0 {
					h.faults = append(h.faults[:i], h.faults[i+1:]...)
				}
			}
			return &hit
		}
	}
	return nil
}

// withFaults answers an armed fault instead of running next.
func (h *Handler) withFaults(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if f := h.take(r); f != nil {
			msg := f.Message
			if msg == "" {
				msg = "gpusim: injected fault"
			}
			kind := map[int]string{401: "UNAUTHENTICATED", 404: errNotFound, 503: "SERVICE_UNAVAILABLE"}[f.Status]
			if kind == "" {
				kind = "ERROR"
			}
			writeError(w, f.Status, kind, "%s", msg)
			return
		}
		next(w, r)
	}
}
