// Package vapi is gpusim's supervisor side of govmomi's vAPI simulator: which clusters are supervisor
// clusters (named in the farm file), the supervisor namespaces and their VM classes, and REST faults armed
// through the control endpoint.
//
// govmomi's namespace-management handlers (vapi/namespace/simulator) serve the VM classes; this package
// replaces what falls short of vCenter there:
//   - supervisor clusters: upstream takes clusters whose names start with "WCP-"; here the farm file names them;
//   - namespaces: upstream keeps them in an unexported map (nothing can seed it), accepts any cluster, and
//     its PATCH answers 200 and then 404 in one response and replaces the whole VM service spec; here a PATCH
//     replaces only the lists it carries, checks that the VM classes exist, and answers 204;
//   - the Supervisor Services running on a supervisor cluster (the TKG Service and its version): upstream has
//     no per-cluster list; here the farm file names them.
//
// Sessions stay upstream's: every request here is authorized by asking the upstream handler.
package vapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
)

// REST paths (vSphere Automation API).
const (
	NamespacesPath   = "/api/vcenter/namespaces/instances"
	ManagementPath   = "/api/vcenter/namespace-management/"
	ClustersPath     = "/api/vcenter/namespace-management/clusters"
	VMClassesPath    = "/api/vcenter/namespace-management/virtual-machine-classes"
	ServicesSuffix   = "/supervisor-services" // after ClustersPath + "/" + cluster moid
	legacySession    = "/rest/com/vmware/cis/session"
	sessionHeader    = "vmware-api-session-id"
	runningStatus    = "RUNNING"
	readyKubernetes  = "READY"
	errNotFound      = "NOT_FOUND"
	errInvalid       = "INVALID_ARGUMENT"
	errAlreadyExists = "ALREADY_EXISTS"
)

// Supervisor is the farm file's `supervisor:` section.
type Supervisor struct {
	Clusters   []string    `yaml:"clusters" json:"clusters"`     // names of the supervisor clusters
	Namespaces []Namespace `yaml:"namespaces" json:"namespaces"` // seeded namespaces
	VMClasses  []VMClass   `yaml:"vm_classes" json:"vm_classes"` // seeded VM classes (e.g. best-effort-small)
	// MemoryField is the one spelling of a VM class's memory in create and update bodies this vCenter honours:
	// "memory_MB" (the API reference's CreateSpec) or "memory_mb"; the other is ignored as an unknown key would
	// be. Empty (the default): both, as govmomi's case-insensitive JSON decoding takes them.
	MemoryField string `yaml:"memory_field" json:"memory_field"`
	// Services are the Supervisor Services each supervisor cluster runs (cluster name -> service id ->
	// current version), e.g. {GPU-Cluster: {tkg.vsphere.vmware.com: 3.1.0}}: what
	// GET .../clusters/{cluster}/supervisor-services lists. A supervisor cluster not named lists none.
	Services map[string]map[string]string `yaml:"services" json:"services"`
}

// Spellings of the VM class memory field: the API reference's CreateSpec and govmomi's Info.
const (
	MemoryFieldUpper = "memory_MB"
	MemoryFieldLower = "memory_mb"
)

// Namespace seeds one supervisor namespace.
type Namespace struct {
	Name      string   `yaml:"name" json:"name"`
	Cluster   string   `yaml:"cluster" json:"cluster"` // a supervisor cluster name
	VMClasses []string `yaml:"vm_classes" json:"vm_classes"`
}

// VMClass seeds one VM class.
type VMClass struct {
	Name     string   `yaml:"name" json:"name"`
	CPUs     int      `yaml:"cpus" json:"cpus"`
	MemoryMB int      `yaml:"memory_mb" json:"memory_mb"`
	VGPUs    []string `yaml:"vgpus" json:"vgpus"` // one profile per vGPU
}

// Validate checks the section against the farm's cluster names.
func (s *Supervisor) Validate(clusters []string) error {
	if s.MemoryField != "" && s.MemoryField != MemoryFieldUpper && s.MemoryField != MemoryFieldLower {
		return fmt.Errorf("supervisor: memory_field %q is not %s or %s", s.MemoryField, MemoryFieldUpper,
			MemoryFieldLower)
	}
	known := map[string]bool{}
	for _, c := range clusters {
		known[c] = true
	}
	sup := map[string]bool{}
	for _, c := range s.Clusters {
		if !known[c] {
			return fmt.Errorf("supervisor: unknown cluster %q", c)
		}
		sup[c] = true
	}
	for c, services := range s.Services {
		if !sup[c] {
			return fmt.Errorf("supervisor: services of %q, which is not one of the supervisor clusters", c)
		}
		for id, version := range services {
			if id == "" || version == "" {
				return fmt.Errorf("supervisor: services of %s: a service id and its version must not be empty", c)
			}
		}
	}
	classes := map[string]bool{}
	for _, c := range s.VMClasses {
		if c.Name == "" || classes[c.Name] {
			return fmt.Errorf("supervisor: VM class name %q is empty or repeated", c.Name)
		}
		classes[c.Name] = true
	}
	names := map[string]bool{}
	for _, n := range s.Namespaces {
		if n.Name == "" || names[n.Name] {
			return fmt.Errorf("supervisor: namespace name %q is empty or repeated", n.Name)
		}
		names[n.Name] = true
		if !sup[n.Cluster] {
			return fmt.Errorf("supervisor: namespace %s: %q is not one of the supervisor clusters", n.Name, n.Cluster)
		}
		for _, c := range n.VMClasses {
			if !classes[c] {
				return fmt.Errorf("supervisor: namespace %s: VM class %q is not seeded", n.Name, c)
			}
		}
	}
	return nil
}

type namespaceInfo struct {
	Cluster          string
	VMClasses        []string
	ContentLibraries []string
}

// Handler serves the supervisor routes and arms REST faults; upstream is govmomi's vAPI handler.
type Handler struct {
	upstream    http.Handler
	clusters    map[string]string            // moid -> name, supervisor clusters only
	services    map[string]map[string]string // moid -> service id -> current version
	memoryField string                       // Supervisor.MemoryField

	mu         sync.Mutex
	namespaces map[string]*namespaceInfo
	faults     []*Fault
}

// New returns a Handler; clusters maps the supervisor clusters' moids to their names.
func New(upstream http.Handler, clusters map[string]string) *Handler {
	return &Handler{upstream: upstream, clusters: clusters, namespaces: map[string]*namespaceInfo{}}
}

// HonourMemoryField makes VM class create and update bodies count only this spelling of the memory field
// (Supervisor.MemoryField); "" takes both.
func (h *Handler) HonourMemoryField(field string) { h.memoryField = field }

// RunServices sets the Supervisor Services a supervisor cluster (by moid) runs: service id -> version.
func (h *Handler) RunServices(moid string, services map[string]string) {
	if h.services == nil {
		h.services = map[string]map[string]string{}
	}
	h.services[moid] = services
}

// Routes are the patterns to register on the server's outer mux (more specific than upstream's /api/).
func (h *Handler) Routes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		NamespacesPath:       h.withFaults(h.authorized(h.serveNamespaces)),
		NamespacesPath + "/": h.withFaults(h.authorized(h.serveNamespaces)),
		ManagementPath:       h.withFaults(h.serveManagement),
	}
}

// SeedNamespace adds a namespace on a supervisor cluster (by name) with these VM classes.
func (h *Handler) SeedNamespace(name, cluster string, classes []string) error {
	for moid, n := range h.clusters {
		if n == cluster {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.namespaces[name] = &namespaceInfo{Cluster: moid, VMClasses: append([]string{}, classes...)}
			return nil
		}
	}
	return fmt.Errorf("namespace %s: %q is not a supervisor cluster", name, cluster)
}

// SeedVMClass creates a VM class through the upstream handler, logged in as user.
func (h *Handler) SeedVMClass(user, password string, c VMClass) error {
	token, err := h.login(user, password)
	if err != nil {
		return err
	}
	devices := []map[string]string{}
	for _, p := range c.VGPUs {
		devices = append(devices, map[string]string{"profile_name": p})
	}
	body, _ := json.Marshal(map[string]any{
		"id": c.Name, "cpu_count": c.CPUs, "memory_mb": c.MemoryMB, "devices": map[string]any{"vgpu_devices": devices},
	})
	rec := h.call(http.MethodPost, VMClassesPath, token, body)
	if rec.Code != http.StatusOK {
		return fmt.Errorf("seed VM class %s: %d %s", c.Name, rec.Code, rec.Body.String())
	}
	return nil
}

func (h *Handler) login(user, password string) (string, error) {
	req := httptest.NewRequest(http.MethodPost, legacySession, nil)
	req.SetBasicAuth(user, password)
	rec := httptest.NewRecorder()
	h.upstream.ServeHTTP(rec, req)
	var out struct {
		Value string `json:"value"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil || out.Value == "" {
		return "", fmt.Errorf("vAPI login: %d %s", rec.Code, rec.Body.String())
	}
	return out.Value, nil
}

// call runs one request through the upstream handler in process.
func (h *Handler) call(method, path, token string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set(sessionHeader, token)
	}
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.upstream.ServeHTTP(rec, req)
	return rec
}

// sessionOf returns the request's session token (header, or upstream's cookie).
func sessionOf(r *http.Request) string {
	if id := r.Header.Get(sessionHeader); id != "" {
		return id
	}
	if c, err := r.Cookie(sessionHeader); err == nil {
		return c.Value
	}
	return ""
}

// authorized lets a request through when upstream knows its session, else answers 401 as upstream does.
func (h *Handler) authorized(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token := sessionOf(r)
		if token == "" || h.call(http.MethodGet, legacySession, token, nil).Code != http.StatusOK {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		next(w, r)
	}
}

func (h *Handler) serveManagement(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == ClustersPath || r.URL.Path == ClustersPath+"/" {
		h.authorized(h.serveClusters)(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, ClustersPath+"/") && strings.HasSuffix(r.URL.Path, ServicesSuffix) {
		h.authorized(h.serveServices)(w, r)
		return
	}
	if h.memoryField != "" && strings.HasPrefix(r.URL.Path, VMClassesPath) &&
		(r.Method == http.MethodPost || r.Method == http.MethodPatch) {
		if err := h.dropOtherMemorySpelling(r); err != nil {
			writeError(w, http.StatusBadRequest, errInvalid, "%v", err)
			return
		}
	}
	h.upstream.ServeHTTP(w, r)
}

// dropOtherMemorySpelling removes the memory field spelled otherwise than memoryField from a VM class body
// before govmomi (which matches JSON keys case-insensitively) reads it: what a server that knows one spelling
// does with the other.
func (h *Handler) dropOtherMemorySpelling(r *http.Request) error {
	var body map[string]json.RawMessage
	raw := new(bytes.Buffer)
	if _, err := raw.ReadFrom(r.Body); err != nil {
		return err
	}
	if err := json.Unmarshal(raw.Bytes(), &body); err != nil {
		return fmt.Errorf("VM class body: %v", err)
	}
	for key := range body {
		if strings.EqualFold(key, MemoryFieldUpper) && key != h.memoryField {
			delete(body, key)
		}
	}
	next, _ := json.Marshal(body)
	r.Body = io.NopCloser(bytes.NewReader(next))
	r.ContentLength = int64(len(next))
	return nil
}

func (h *Handler) serveClusters(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	out := []map[string]string{}
	for _, moid := range sortedKeys(h.clusters) {
		out = append(out, map[string]string{
			"cluster": moid, "cluster_name": h.clusters[moid],
			"config_status": runningStatus, "kubernetes_status": readyKubernetes,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// serveServices lists the Supervisor Services of one supervisor cluster as vCenter's
// ClusterSupervisorServices.list does (vSphere API 7.0.3): supervisor_service, desired_version,
// current_version, config_status.
func (h *Handler) serveServices(w http.ResponseWriter, r *http.Request) {
	moid := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, ClustersPath+"/"), ServicesSuffix)
	if r.Method != http.MethodGet {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	if _, ok := h.clusters[moid]; !ok {
		writeError(w, http.StatusNotFound, errNotFound, "cluster %s is not a supervisor cluster", moid)
		return
	}
	out := []map[string]string{}
	for _, id := range sortedKeys(h.services[moid]) {
		v := h.services[moid][id]
		out = append(out, map[string]string{
			"supervisor_service": id, "desired_version": v, "current_version": v, "config_status": "CONFIGURED",
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) serveNamespaces(w http.ResponseWriter, r *http.Request) {
	name := strings.Trim(strings.TrimPrefix(r.URL.Path, NamespacesPath), "/")
	switch {
	case name == "" && r.Method == http.MethodGet:
		h.listNamespaces(w)
	case name == "" && r.Method == http.MethodPost:
		h.createNamespace(w, r)
	case name != "" && !strings.Contains(name, "/") && r.Method == http.MethodGet:
		h.getNamespace(w, name)
	case name != "" && !strings.Contains(name, "/") && r.Method == http.MethodPatch:
		h.patchNamespace(w, r, name)
	case name != "" && !strings.Contains(name, "/") && r.Method == http.MethodDelete:
		h.deleteNamespace(w, name)
	default:
		writeError(w, http.StatusNotFound, errNotFound, "no such operation: %s %s", r.Method, r.URL.Path)
	}
}

func (h *Handler) listNamespaces(w http.ResponseWriter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := []map[string]any{}
	for _, name := range sortedKeys(h.namespaces) {
		ns := h.namespaces[name]
		out = append(out, map[string]any{
			"namespace": name, "cluster": ns.Cluster, "config_status": runningStatus, "description": "",
			"stats": map[string]int{"cpu_used": 0, "memory_used": 0, "storage_used": 0},
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) getNamespace(w http.ResponseWriter, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ns, ok := h.namespaces[name]
	if !ok {
		writeError(w, http.StatusNotFound, errNotFound, "namespace %s does not exist", name)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"cluster": ns.Cluster, "config_status": runningStatus, "description": "",
		"stats":           map[string]int{"cpu_used": 0, "memory_used": 0, "storage_used": 0},
		"vm_service_spec": map[string][]string{"vm_classes": nonNil(ns.VMClasses), "content_libraries": nonNil(ns.ContentLibraries)},
	})
}

type vmServiceSpec struct {
	VMClasses        *[]string `json:"vm_classes"`
	ContentLibraries *[]string `json:"content_libraries"`
}

func (h *Handler) createNamespace(w http.ResponseWriter, r *http.Request) {
	var spec struct {
		Cluster   string         `json:"cluster"`
		Namespace string         `json:"namespace"`
		VMService *vmServiceSpec `json:"vm_service_spec"`
	}
	if err := json.NewDecoder(r.Body).Decode(&spec); err != nil || spec.Namespace == "" {
		writeError(w, http.StatusBadRequest, errInvalid, "a namespace create spec needs cluster and namespace")
		return
	}
	if _, ok := h.clusters[spec.Cluster]; !ok {
		writeError(w, http.StatusBadRequest, errInvalid, "cluster %s is not a supervisor cluster", spec.Cluster)
		return
	}
	info := &namespaceInfo{Cluster: spec.Cluster}
	if !h.applyVMService(w, sessionOf(r), info, spec.VMService) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, exists := h.namespaces[spec.Namespace]; exists {
		writeError(w, http.StatusBadRequest, errAlreadyExists, "namespace %s already exists", spec.Namespace)
		return
	}
	h.namespaces[spec.Namespace] = info
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) patchNamespace(w http.ResponseWriter, r *http.Request, name string) {
	var spec struct {
		VMService *vmServiceSpec `json:"vm_service_spec"`
	}
	if err := json.NewDecoder(r.Body).Decode(&spec); err != nil {
		writeError(w, http.StatusBadRequest, errInvalid, "bad namespace update spec: %v", err)
		return
	}
	h.mu.Lock()
	current, ok := h.namespaces[name]
	var next namespaceInfo
	if ok {
		next = *current
	}
	h.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, errNotFound, "namespace %s does not exist", name)
		return
	}
	if !h.applyVMService(w, sessionOf(r), &next, spec.VMService) {
		return
	}
	h.mu.Lock()
	h.namespaces[name] = &next
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// applyVMService replaces the lists the spec carries; every VM class must exist (asked upstream).
func (h *Handler) applyVMService(w http.ResponseWriter, token string, info *namespaceInfo, spec *vmServiceSpec) bool {
	if spec == nil {
		return true
	}
	if spec.VMClasses != nil {
		for _, c := range *spec.VMClasses {
			if h.call(http.MethodGet, VMClassesPath+"/"+c, token, nil).Code != http.StatusOK {
				writeError(w, http.StatusBadRequest, errInvalid, "VM class %s does not exist", c)
				return false
			}
		}
		info.VMClasses = append([]string{}, *spec.VMClasses...)
	}
	if spec.ContentLibraries != nil {
		info.ContentLibraries = append([]string{}, *spec.ContentLibraries...)
	}
	return true
}

func (h *Handler) deleteNamespace(w http.ResponseWriter, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.namespaces[name]; !ok {
		writeError(w, http.StatusNotFound, errNotFound, "namespace %s does not exist", name)
		return
	}
	delete(h.namespaces, name)
	w.WriteHeader(http.StatusNoContent)
}

// writeError answers in vCenter's /api error shape: {"error_type", "messages": [{"default_message"}]}.
func writeError(w http.ResponseWriter, status int, kind, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	writeJSON(w, status, map[string]any{
		"error_type": kind,
		"messages":   []map[string]any{{"id": "gpusim." + strings.ToLower(kind), "default_message": msg, "args": []string{}}},
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
