package vapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"gpusim/internal/farm"
)

// A vSphere Lifecycle Manager subset over the vSphere Automation REST API (esx/settings, cis/tasks): what a
// driver upgrade of NVIDIA's vGPU Manager on a cluster managed by an image needs and no more (vSphere Automation
// API reference, https://developer.broadcom.com/xapis/vsphere-automation-api/latest/esx/):
//
//	GET   /api/esx/settings/clusters/{cluster}/enablement/software      {"enabled": bool}
//	GET   /api/esx/settings/clusters/{cluster}/software                 the image: base_image, components
//	POST  /api/esx/settings/clusters/{cluster}/software/drafts          a draft of the image (its id)
//	PATCH /api/esx/settings/clusters/{cluster}/software/drafts/{d}/software/components   components_to_set/_delete
//	DELETE /api/esx/settings/clusters/{cluster}/software/drafts/{d}
//	POST  /api/esx/settings/clusters/{cluster}/software/drafts/{d}?action=commit&vmw-task=true   a task (result: commit)
//	POST  /api/esx/settings/clusters/{cluster}/software?action=scan&vmw-task=true
//	GET   /api/esx/settings/clusters/{cluster}/software/compliance      per host: COMPLIANT / NON_COMPLIANT
//	POST  /api/esx/settings/clusters/{cluster}/software?action=apply&vmw-task=true   {commit, hosts, accept_eula}
//	GET|POST /api/esx/settings/depots/offline[?vmw-task=true]           imported offline bundles (PULL from a location)
//	GET|POST /api/esx/settings/depots/online, POST /api/esx/settings/depots?action=sync&vmw-task=true
//	GET   /api/esx/settings/depot-content/components                    components of the imported and synced depots
//	GET   /api/cis/tasks/{task}                                         status, result, error
//
// An apply remediates its hosts one after the other (Fleet.Remediate: maintenance mode, the component, a reboot
// when it asks for one) and fails at the first host that cannot be remediated, as vLCM stops there.

// Lifecycle paths.
const (
	settingsPath = "/api/esx/settings/"
	tasksPath    = "/api/cis/tasks/"
)

// FleetHost is a host of a cluster: its moid and name.
type FleetHost struct{ Moid, Name string }

// FleetCluster is a cluster: its name, whether an image manages it, its hosts.
type FleetCluster struct {
	Name         string
	ImageManaged bool
	Hosts        []FleetHost
}

// Fleet is what the lifecycle handler reads and drives of the farm.
type Fleet interface {
	Clusters() map[string]FleetCluster // by moid
	Depot(location string) (farm.DepotSpec, error)
	Installed(host string) (component, version string)
	Remediate(host, location, component string) error
}

type image struct {
	base       string
	components map[string]string
}

type depot struct {
	Location    string `json:"location"`
	SourceType  string `json:"source_type,omitempty"`
	Description string `json:"description"`
	Enabled     bool   `json:"enabled,omitempty"`
	online      bool
	synced      bool
}

type lcTask struct {
	Status    string `json:"status"`
	Operation string `json:"operation"`
	Result    any    `json:"result,omitempty"`
	Error     any    `json:"error,omitempty"`
	StartTime string `json:"start_time"`
	EndTime   string `json:"end_time,omitempty"`
}

// Lifecycle serves the subset; its state is in memory.
type Lifecycle struct {
	auth  *Handler
	fleet Fleet

	mu      sync.Mutex
	images  map[string]*image
	drafts  map[string]*image // draft id -> its image (cluster in draftOf)
	draftOf map[string]string
	depots  map[string]*depot
	tasks   map[string]*lcTask
	seq     int
}

// BaseImage is the ESXi base image version of every image gpusim starts with.
const BaseImage = "8.0.3-0.0.24022510"

// NewLifecycle returns the handler; each image-managed cluster's image starts with the NVIDIA component its
// first host has installed.
func NewLifecycle(upstream http.Handler, fleet Fleet) *Lifecycle {
	l := &Lifecycle{auth: &Handler{upstream: upstream}, fleet: fleet, images: map[string]*image{},
		drafts: map[string]*image{}, draftOf: map[string]string{}, depots: map[string]*depot{}, tasks: map[string]*lcTask{}}
	for moid, c := range fleet.Clusters() {
		if !c.ImageManaged {
			continue
		}
		img := &image{base: BaseImage, components: map[string]string{}}
		if len(c.Hosts) > 0 {
			if name, version := fleet.Installed(c.Hosts[0].Name); name != "" {
				img.components[name] = version
			}
		}
		l.images[moid] = img
	}
	return l
}

// Routes are the patterns to register on the server's mux.
func (l *Lifecycle) Routes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		settingsPath: l.auth.authorized(l.serveSettings),
		tasksPath:    l.auth.authorized(l.serveTask),
	}
}

func (l *Lifecycle) serveSettings(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, settingsPath), "/"), "/")
	action := r.URL.Query().Get("action")
	switch {
	case len(parts) >= 2 && parts[0] == "clusters":
		l.serveCluster(w, r, parts[1], parts[2:], action)
	case parts[0] == "depots":
		l.serveDepots(w, r, parts[1:], action)
	case strings.Join(parts, "/") == "depot-content/components" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, l.depotContent())
	default:
		writeError(w, http.StatusNotFound, errNotFound, "no such operation: %s %s", r.Method, r.URL.Path)
	}
}

func (l *Lifecycle) serveCluster(w http.ResponseWriter, r *http.Request, moid string, rest []string, action string) {
	c, ok := l.fleet.Clusters()[moid]
	if !ok {
		writeError(w, http.StatusNotFound, errNotFound, "cluster %s does not exist", moid)
		return
	}
	path := strings.Join(rest, "/")
	if path == "enablement/software" && r.Method == http.MethodGet {
		writeJSON(w, http.StatusOK, map[string]bool{"enabled": c.ImageManaged})
		return
	}
	l.mu.Lock()
	img := l.images[moid]
	l.mu.Unlock()
	if img == nil {
		writeError(w, http.StatusNotFound, errNotFound, "cluster %s is not managed by a single software specification", c.Name)
		return
	}
	switch {
	case path == "software" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, l.imageInfo(img))
	case path == "software" && r.Method == http.MethodPost && action == "scan":
		writeJSON(w, http.StatusOK, l.finished("scan", nil, nil))
	case path == "software" && r.Method == http.MethodPost && action == "apply":
		l.apply(w, r, moid, c)
	case path == "software/compliance" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, l.compliance(img, c))
	case path == "software/drafts" && r.Method == http.MethodPost:
		writeJSON(w, http.StatusOK, l.newDraft(moid, img))
	case strings.HasPrefix(path, "software/drafts/"):
		l.serveDraft(w, r, moid, strings.TrimPrefix(path, "software/drafts/"), action)
	default:
		writeError(w, http.StatusNotFound, errNotFound, "no such operation: %s %s", r.Method, r.URL.Path)
	}
}

func (l *Lifecycle) imageInfo(img *image) map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	comps := map[string]any{}
	for name, version := range img.components {
		comps[name] = map[string]any{"version": version, "details": l.details(name, version)}
	}
	return map[string]any{"base_image": map[string]any{"version": img.base}, "components": comps}
}

// details are a component's display name, vendor and version from the depots that hold it (l.mu held).
func (l *Lifecycle) details(name, version string) map[string]string {
	for _, c := range l.available() {
		if c.Name == name && c.Version == version {
			return map[string]string{"display_name": c.DisplayName, "vendor": c.Vendor, "display_version": farm.DriverVersion(version)}
		}
	}
	return map[string]string{"display_name": name, "vendor": "", "display_version": version}
}

func (l *Lifecycle) newDraft(moid string, img *image) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	id := fmt.Sprintf("%d", l.seq)
	d := &image{base: img.base, components: map[string]string{}}
	for k, v := range img.components {
		d.components[k] = v
	}
	l.drafts[id], l.draftOf[id] = d, moid
	return id
}

func (l *Lifecycle) serveDraft(w http.ResponseWriter, r *http.Request, moid, rest, action string) {
	id, sub, _ := strings.Cut(rest, "/")
	l.mu.Lock()
	d, ok := l.drafts[id]
	ok = ok && l.draftOf[id] == moid
	l.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, errNotFound, "draft %s does not exist", id)
		return
	}
	switch {
	case sub == "software/components" && r.Method == http.MethodPatch:
		l.updateComponents(w, r, d)
	case sub == "" && r.Method == http.MethodDelete:
		l.mu.Lock()
		delete(l.drafts, id)
		l.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case sub == "" && r.Method == http.MethodPost && action == "commit":
		l.mu.Lock()
		l.images[moid] = d
		delete(l.drafts, id)
		l.seq++
		commit := fmt.Sprintf("%d", l.seq)
		l.mu.Unlock()
		writeJSON(w, http.StatusOK, l.finished("commit", commit, nil))
	default:
		writeError(w, http.StatusNotFound, errNotFound, "no such operation: %s %s", r.Method, r.URL.Path)
	}
}

// updateComponents applies a Components.UpdateSpec: every version set must be in a depot vCenter holds.
func (l *Lifecycle) updateComponents(w http.ResponseWriter, r *http.Request, d *image) {
	var spec struct {
		Set    map[string]string `json:"components_to_set"`
		Delete []string          `json:"components_to_delete"`
	}
	if err := json.NewDecoder(r.Body).Decode(&spec); err != nil {
		writeError(w, http.StatusBadRequest, errInvalid, "bad components update spec: %v", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, version := range spec.Set {
		if l.depotOf(name, version) == "" {
			writeError(w, http.StatusBadRequest, errInvalid, "component %s version %s is not in any depot", name, version)
			return
		}
	}
	for name, version := range spec.Set {
		d.components[name] = version
	}
	for _, name := range spec.Delete {
		delete(d.components, name)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (l *Lifecycle) compliance(img *image, c FleetCluster) map[string]any {
	l.mu.Lock()
	want := map[string]string{}
	for k, v := range img.components {
		want[k] = v
	}
	l.mu.Unlock()
	hosts := map[string]any{}
	compliant, non := []string{}, []string{}
	for _, h := range c.Hosts {
		name, version := l.fleet.Installed(h.Name)
		status := "COMPLIANT"
		for k, v := range want {
			if farm.DriverVersion(v) != "" && (k != name || version != v) {
				status = "NON_COMPLIANT"
			}
		}
		hosts[h.Moid] = map[string]any{"status": status, "installed": map[string]string{name: version}}
		if status == "COMPLIANT" {
			compliant = append(compliant, h.Moid)
		} else {
			non = append(non, h.Moid)
		}
	}
	status := "COMPLIANT"
	if len(non) > 0 {
		status = "NON_COMPLIANT"
	}
	return map[string]any{"status": status, "compliant_hosts": compliant, "non_compliant_hosts": non, "hosts": hosts,
		"scan_time": time.Now().UTC().Format(time.RFC3339)}
}

// apply starts a task that remediates the spec's hosts (all of the cluster's without them), one after the other.
func (l *Lifecycle) apply(w http.ResponseWriter, r *http.Request, moid string, c FleetCluster) {
	var spec struct {
		Commit     string   `json:"commit"`
		Hosts      []string `json:"hosts"`
		AcceptEULA bool     `json:"accept_eula"`
	}
	if err := json.NewDecoder(r.Body).Decode(&spec); err != nil {
		writeError(w, http.StatusBadRequest, errInvalid, "bad apply spec: %v", err)
		return
	}
	var hosts []FleetHost
	for _, h := range c.Hosts {
		if len(spec.Hosts) == 0 || contains(spec.Hosts, h.Moid) {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 || len(hosts) < len(spec.Hosts) {
		writeError(w, http.StatusBadRequest, errInvalid, "hosts %v are not all hosts of cluster %s", spec.Hosts, c.Name)
		return
	}
	id, task := l.startTask("apply")
	go func() {
		err := l.remediate(moid, hosts)
		l.mu.Lock()
		defer l.mu.Unlock()
		task.EndTime = time.Now().UTC().Format(time.RFC3339)
		if err != nil {
			task.Status, task.Error = "FAILED", stdError(err.Error())
			return
		}
		task.Status = "SUCCEEDED"
	}()
	writeJSON(w, http.StatusOK, id)
}

func (l *Lifecycle) remediate(moid string, hosts []FleetHost) error {
	l.mu.Lock()
	want := map[string]string{}
	for k, v := range l.images[moid].components {
		want[k] = v
	}
	l.mu.Unlock()
	for _, h := range hosts {
		for name, version := range want {
			if got, v := l.fleet.Installed(h.Name); got == name && v == version {
				continue
			}
			l.mu.Lock()
			location := l.depotOf(name, version)
			l.mu.Unlock()
			if err := l.fleet.Remediate(h.Name, location, name); err != nil {
				return fmt.Errorf("remediation of host %s failed: %v", h.Name, err)
			}
		}
	}
	return nil
}

func (l *Lifecycle) serveDepots(w http.ResponseWriter, r *http.Request, rest []string, action string) {
	kind := strings.Join(rest, "/")
	switch {
	case kind == "" && r.Method == http.MethodPost && action == "sync":
		writeJSON(w, http.StatusOK, l.sync())
	case (kind == "offline" || kind == "online") && r.Method == http.MethodGet:
		l.mu.Lock()
		out := map[string]*depot{}
		for id, d := range l.depots {
			if d.online == (kind == "online") {
				out[id] = d
			}
		}
		l.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	case (kind == "offline" || kind == "online") && r.Method == http.MethodPost:
		l.addDepot(w, r, kind == "online")
	default:
		writeError(w, http.StatusNotFound, errNotFound, "no such operation: %s %s", r.Method, r.URL.Path)
	}
}

// addDepot imports an offline bundle from its location (a task that fails when the location cannot be read), or
// adds an online depot (synced later).
func (l *Lifecycle) addDepot(w http.ResponseWriter, r *http.Request, online bool) {
	var spec depot
	if err := json.NewDecoder(r.Body).Decode(&spec); err != nil || spec.Location == "" {
		writeError(w, http.StatusBadRequest, errInvalid, "a depot needs a location")
		return
	}
	spec.online = online
	if online {
		l.mu.Lock()
		l.seq++
		id := fmt.Sprintf("depot-%d", l.seq)
		l.depots[id] = &spec
		l.mu.Unlock()
		writeJSON(w, http.StatusOK, id)
		return
	}
	if _, err := l.fleet.Depot(spec.Location); err != nil {
		writeJSON(w, http.StatusOK, l.finished("import", nil, fmt.Errorf("cannot import the depot: %v", err)))
		return
	}
	l.mu.Lock()
	l.seq++
	id := fmt.Sprintf("depot-%d", l.seq)
	spec.synced = true
	l.depots[id] = &spec
	l.mu.Unlock()
	writeJSON(w, http.StatusOK, l.finished("import", id, nil))
}

// sync reads every online depot; one that cannot be read fails the task.
func (l *Lifecycle) sync() string {
	l.mu.Lock()
	var online []*depot
	for _, d := range l.depots {
		if d.online {
			online = append(online, d)
		}
	}
	l.mu.Unlock()
	for _, d := range online {
		if _, err := l.fleet.Depot(d.Location); err != nil {
			return l.finished("sync", nil, fmt.Errorf("cannot sync the depot: %v", err))
		}
		l.mu.Lock()
		d.synced = true
		l.mu.Unlock()
	}
	return l.finished("sync", nil, nil)
}

// available lists the components of the imported and synced depots (l.mu held).
func (l *Lifecycle) available() []farm.Component {
	var out []farm.Component
	for _, d := range l.depots {
		if !d.synced {
			continue
		}
		if spec, err := l.fleet.Depot(d.Location); err == nil {
			out = append(out, spec.Components...)
		}
	}
	return out
}

// depotOf is the location of a depot vCenter holds with the component version ("" none; l.mu held).
func (l *Lifecycle) depotOf(name, version string) string {
	ids := make([]string, 0, len(l.depots))
	for id := range l.depots {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		d := l.depots[id]
		spec, err := l.fleet.Depot(d.Location)
		if !d.synced || err != nil {
			continue
		}
		for _, c := range spec.Components {
			if c.Name == name && c.Version == version {
				return d.Location
			}
		}
	}
	return ""
}

// depotContent is GET depot-content/components: a summary per component with its versions.
func (l *Lifecycle) depotContent() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	byName := map[string]map[string]any{}
	var names []string
	for _, c := range l.available() {
		s, ok := byName[c.Name]
		if !ok {
			s = map[string]any{"name": c.Name, "display_name": c.DisplayName, "vendor": c.Vendor, "versions": []map[string]string{}}
			byName[c.Name] = s
			names = append(names, c.Name)
		}
		s["versions"] = append(s["versions"].([]map[string]string),
			map[string]string{"version": c.Version, "display_version": farm.DriverVersion(c.Version)})
	}
	sort.Strings(names)
	out := []map[string]any{}
	for _, n := range names {
		out = append(out, byName[n])
	}
	return out
}

func (l *Lifecycle) startTask(op string) (string, *lcTask) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	id := fmt.Sprintf("task-%d:com.vmware.esx.settings", l.seq)
	t := &lcTask{Status: "RUNNING", Operation: op, StartTime: time.Now().UTC().Format(time.RFC3339)}
	l.tasks[id] = t
	return id, t
}

// finished records a task that is already over: its result, or its error.
func (l *Lifecycle) finished(op string, result any, err error) string {
	id, t := l.startTask(op)
	l.mu.Lock()
	defer l.mu.Unlock()
	t.EndTime = t.StartTime
	if err != nil {
		t.Status, t.Error = "FAILED", stdError(err.Error())
	} else {
		t.Status, t.Result = "SUCCEEDED", result
	}
	return id
}

func (l *Lifecycle) serveTask(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, tasksPath)
	l.mu.Lock()
	t, ok := l.tasks[id]
	var out lcTask
	if ok {
		out = *t
	}
	l.mu.Unlock()
	if !ok || r.Method != http.MethodGet {
		writeError(w, http.StatusNotFound, errNotFound, "task %s does not exist", id)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func stdError(msg string) map[string]any {
	return map[string]any{"error_type": "ERROR", "messages": []map[string]any{
		{"id": "gpusim.lifecycle", "default_message": msg, "args": []string{}}}}
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
