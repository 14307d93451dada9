package esxsh

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Info is what the control endpoint shows about the SSH side.
type Info struct {
	User       string              `json:"user"`
	KnownHosts string              `json:"known_hosts,omitempty"` // path of the known_hosts file gpusim wrote
	HostMap    string              `json:"host_map,omitempty"`    // path of the host -> address JSON file
	Hosts      map[string]Endpoint `json:"hosts"`
	Faults     []Fault             `json:"faults"`
}

// Info describes the endpoints, the files written by WriteFiles and the armed faults.
func (s *Server) Info() Info {
	s.mu.Lock()
	kh, hm := s.files.knownHosts, s.files.hostMap
	s.mu.Unlock()
	return Info{User: s.cfg.User, KnownHosts: kh, HostMap: hm, Hosts: s.Endpoints(), Faults: s.Faults()}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// ControlHandler serves, under prefix (e.g. /gpusim/ssh):
//
//	GET    prefix             Info as JSON
//	GET    prefix/known_hosts the known_hosts text
//	GET    prefix/faults      armed faults
//	POST   prefix/faults      arm a fault: {"host","kind":"hang|fail|refuse|drop","match","exit","stdout","stderr","times"}
//	DELETE prefix/faults      disarm all faults (?host=NAME: that host's only)
func (s *Server) ControlHandler(prefix string) http.Handler {
	prefix = strings.TrimRight(prefix, "/")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sub := strings.TrimPrefix(r.URL.Path, prefix)
		switch {
		case (sub == "" || sub == "/") && r.Method == http.MethodGet:
			writeJSON(w, http.StatusOK, s.Info())
		case sub == "/known_hosts" && r.Method == http.MethodGet:
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte(s.KnownHosts()))
		case sub == "/faults":
			s.serveFaults(w, r)
		default:
			writeError(w, http.StatusNotFound, "no such SSH control route: "+r.Method+" "+r.URL.Path)
		}
	})
}

func (s *Server) serveFaults(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, s.Faults())
	case http.MethodPost:
		var f Fault
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			writeError(w, http.StatusBadRequest, "bad fault: "+err.Error())
			return
		}
		added, err := s.AddFault(f)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, http.StatusCreated, added)
	case http.MethodDelete:
		if err := s.ClearFaults(r.URL.Query().Get("host")); err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, s.Faults())
	default:
		writeError(w, http.StatusMethodNotAllowed, "use GET, POST or DELETE")
	}
}
