package vc

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
	"gpusim/internal/fault"
)

// HandleControl registers an extra control route (Go 1.22 ServeMux pattern under /gpusim/, e.g.
// "POST /gpusim/ssh/faults"). It may be called before or after Start.
func (s *Sim) HandleControl(pattern string, h http.HandlerFunc) {
	s.control.HandleFunc(pattern, h)
}

func (s *Sim) serveControl(w http.ResponseWriter, r *http.Request) {
	s.control.ServeHTTP(w, r)
}

// WriteJSON writes v as a JSON response.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError writes {"error": msg} with the status.
func WriteError(w http.ResponseWriter, status int, format string, args ...any) {
	WriteJSON(w, status, map[string]string{"error": fmt.Sprintf(format, args...)})
}

// DecodeJSON reads a JSON body strictly (unknown fields are errors).
func DecodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}

func (s *Sim) registerControl() {
	s.HandleControl("GET /gpusim/{$}", func(w http.ResponseWriter, r *http.Request) {
		cat := s.Farm.Catalog()
		WriteJSON(w, http.StatusOK, map[string]any{"gpusim": true, "hosts": len(s.hosts),
			"catalogue": map[string]any{"path": cat.Path, "sha256": cat.Digest, "models": cat.Names()}})
	})
	s.HandleControl("/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, "unknown control endpoint %s %s", r.Method, r.URL.Path)
	})
	s.HandleControl("GET /gpusim/assignments", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]any{"assignments": s.Farm.Assignments()})
	})
	s.HandleControl("GET /gpusim/hosts", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]any{"hosts": s.Farm.Hosts()})
	})
	s.HandleControl("GET /gpusim/hosts/{name}", func(w http.ResponseWriter, r *http.Request) {
		info, err := s.Farm.Host(r.PathValue("name"))
		if err != nil {
			WriteError(w, http.StatusBadRequest, "%v", err)
			return
		}
		WriteJSON(w, http.StatusOK, info)
	})
	s.HandleControl("POST /gpusim/hosts/{name}/down", func(w http.ResponseWriter, r *http.Request) { s.setDown(w, r, true) })
	s.HandleControl("POST /gpusim/hosts/{name}/up", func(w http.ResponseWriter, r *http.Request) { s.setDown(w, r, false) })
	s.HandleControl("POST /gpusim/hosts/{name}/reboot-faults", s.armRebootFault)
	s.HandleControl("DELETE /gpusim/hosts/{name}/reboot-faults", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if err := s.Farm.ClearRebootFault(name); err != nil {
			WriteError(w, http.StatusBadRequest, "%v", err)
			return
		}
		WriteJSON(w, http.StatusOK, map[string]any{"host": name, "cleared": true})
	})
	s.HandleControl("POST /gpusim/hosts/{name}/access", s.setAccess) // hostaccess.go
	s.HandleControl("POST /gpusim/vms/{name}/guest", s.setGuest)
	s.HandleControl("POST /gpusim/vms/{name}/customization-fault", s.armCustomizationFault)
	s.HandleControl("GET /gpusim/hosts/{name}/nics", func(w http.ResponseWriter, r *http.Request) {
		nics, err := s.NICState(r.PathValue("name"))
		if err != nil {
			WriteError(w, http.StatusBadRequest, "%v", err)
			return
		}
		WriteJSON(w, http.StatusOK, map[string]any{"host": r.PathValue("name"), "nics": nics})
	})
	s.HandleControl("GET /gpusim/faults", func(w http.ResponseWriter, r *http.Request) {
		f, d, after := s.faults.list()
		WriteJSON(w, http.StatusOK, map[string]any{"faults": f, "delays": d, "followups": after, "known": fault.Names()})
	})
	s.HandleControl("DELETE /gpusim/faults", func(w http.ResponseWriter, r *http.Request) {
		s.faults.clear()
		WriteJSON(w, http.StatusOK, map[string]any{"cleared": true})
	})
	s.HandleControl("POST /gpusim/faults", s.armFault)
	s.HandleControl("POST /gpusim/delays", s.armDelay)
	s.HandleControl("POST /gpusim/followups", s.armFollowup)
	s.registerHolds()
	s.registerState()
	s.registerSoftwareControl() // software.go
}

func (s *Sim) setDown(w http.ResponseWriter, r *http.Request, down bool) {
	name := r.PathValue("name")
	if err := s.Farm.SetDown(name, down); err != nil {
		WriteError(w, http.StatusBadRequest, "%v", err)
		return
	}
	info, _ := s.Farm.Host(name)
	WriteJSON(w, http.StatusOK, map[string]any{"host": name, "connectionState": info.ConnectionState})
}

// ResolveObject finds a managed object by moref value ("vm-42", "host-21", "CustomFieldsManager") or by
// inventory name.
func (s *Sim) ResolveObject(name string) (types.ManagedObjectReference, bool) {
	if name == "" {
		return types.ManagedObjectReference{}, false
	}
	kinds := []string{"VirtualMachine", "HostSystem", "ClusterComputeResource", "Folder", "Datacenter", "CustomFieldsManager",
		"AuthorizationManager", "PerformanceManager", "SessionManager", "PropertyCollector"}
	for _, kind := range kinds {
		if obj := s.ctx.Map.Get(types.ManagedObjectReference{Type: kind, Value: name}); obj != nil {
			return obj.Reference(), true
		}
	}
	if h, ok := s.hosts[name]; ok {
		return h.Self, true
	}
	for _, kind := range []string{"VirtualMachine", "ClusterComputeResource", "Datacenter"} {
		for _, obj := range s.ctx.Map.All(kind) {
			if e, ok := obj.(interface{ Entity() *mo.ManagedEntity }); ok && e.Entity().Name == name {
				return obj.Reference(), true
			}
		}
	}
	return types.ManagedObjectReference{}, false
}

// armRebootFault makes the host's next reboots leave pending MIG modes and/or configured module
// options unapplied: {"ignore": ["mig", "modules"], "count": 1}.
func (s *Sim) armRebootFault(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var req farm.RebootFault
	if err := DecodeJSON(r, &req); err != nil {
		WriteError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if req.Count == 0 {
		req.Count = 1
	}
	if err := s.Farm.SetRebootFault(name, req); err != nil {
		WriteError(w, http.StatusBadRequest, "%v", err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"host": name, "rebootFault": req})
}

type faultRequest struct {
	Object  string  `json:"object"`
	Method  string  `json:"method"`
	Fault   string  `json:"fault"`
	Count   int     `json:"count"`
	Message string  `json:"message"`
	Seconds float64 `json:"seconds"`
	NumCPUs int32   `json:"numCPUs"`
}

func (s *Sim) parseArm(w http.ResponseWriter, r *http.Request, needFault bool) (*armed, bool) {
	var req faultRequest
	if err := DecodeJSON(r, &req); err != nil {
		WriteError(w, http.StatusBadRequest, "%v", err)
		return nil, false
	}
	ref, ok := s.ResolveObject(req.Object)
	if !ok {
		WriteError(w, http.StatusBadRequest, "unknown object %q", req.Object)
		return nil, false
	}
	if req.Method == "" {
		WriteError(w, http.StatusBadRequest, "method is required (e.g. PowerOnVM_Task)")
		return nil, false
	}
	if needFault {
		if !fault.Known(req.Fault) {
			WriteError(w, http.StatusBadRequest, "unknown fault %q (known: %s)", req.Fault, strings.Join(fault.Names(), ", "))
			return nil, false
		}
	}
	if req.Count == 0 {
		req.Count = 1
	}
	if req.Count < 0 || req.Seconds < 0 {
		WriteError(w, http.StatusBadRequest, "count and seconds must not be negative")
		return nil, false
	}
	return &armed{Object: ref.Value, Name: req.Object, Method: req.Method, Fault: req.Fault, Count: req.Count,
		Msg: req.Message, DelayS: req.Seconds, Delay: time.Duration(req.Seconds * float64(time.Second)),
		CPUs: req.NumCPUs}, true
}

func (s *Sim) armFault(w http.ResponseWriter, r *http.Request) {
	s.arm(w, r, true, &s.faults.faults, func(*armed) string { return "" })
}

func (s *Sim) armDelay(w http.ResponseWriter, r *http.Request) {
	s.arm(w, r, false, &s.faults.delays, func(a *armed) string {
		if a.Delay <= 0 {
			return "seconds must be > 0"
		}
		return ""
	})
}

// armFollowup arms a change gpusim makes itself right after the next `count` ReconfigVM_Task, PowerOffVM_Task or
// CloneVM_Task bodies on the VM, before each task reports: the VM's vCPUs (the new VM's, for a clone) set to
// numCPUs (its changeVersion moving again), as another client's reconfigure landing between the caller's task and
// its next read of the VM.
func (s *Sim) armFollowup(w http.ResponseWriter, r *http.Request) {
	s.arm(w, r, false, &s.faults.followups, func(a *armed) string {
		if !followupMethods[a.Method] || a.CPUs <= 0 {
			return "a followup is a ReconfigVM_Task's, a PowerOffVM_Task's or a CloneVM_Task's, with numCPUs > 0"
		}
		return ""
	})
}

// arm adds the request's armed entry to list unless refuse names a reason (400).
func (s *Sim) arm(w http.ResponseWriter, r *http.Request, needFault bool, list *[]*armed, refuse func(*armed) string) {
	a, ok := s.parseArm(w, r, needFault)
	if !ok {
		return
	}
	if why := refuse(a); why != "" {
		WriteError(w, http.StatusBadRequest, "%s", why)
		return
	}
	s.faults.mu.Lock()
	*list = append(*list, a)
	s.faults.mu.Unlock()
	WriteJSON(w, http.StatusOK, a)
}

var followupMethods = map[string]bool{"ReconfigVM_Task": true, "PowerOffVM_Task": true, "CloneVM_Task": true}

type guestRequest struct {
	IP       string `json:"ip"`
	State    string `json:"state"` // running | notRunning | shuttingDown | resetting | standby
	Hostname string `json:"hostname"`
}

func (s *Sim) setGuest(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ref, ok := s.ResolveObject(name)
	vm, isVM := s.vmObject(ref)
	if !ok || !isVM {
		WriteError(w, http.StatusBadRequest, "unknown VM %q", name)
		return
	}
	var req guestRequest
	if err := DecodeJSON(r, &req); err != nil {
		WriteError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if req.State == "" {
		req.State = "running"
	}
	if err := s.ReportGuest(ref, GuestReport{IP: req.IP, State: req.State, Hostname: req.Hostname}); err != nil {
		WriteError(w, http.StatusBadRequest, "%v", err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"vm": vm.Name, "ip": req.IP, "state": req.State})
}
