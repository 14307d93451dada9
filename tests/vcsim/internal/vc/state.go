package vc

import (
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

// What a client changed. `GET /gpusim/state` answers what vCenter holds that a client can change: the farm's
// hosts (GPUs, module options, maintenance, SSH service and lockdown), the custom attribute definitions and
// every entity's custom values, the folders, each VM's power state and configuration version, the tasks
// created and the calls of methods that change something, per method. Two reads around a command that must
// not write compare equal exactly when it wrote nothing (a write undone again, such as a service started and
// stopped, still counts in `writes`).

// writeMethods change state without being tasks (every *_Task method counts as a write too).
var writeMethods = map[string]bool{
	"SetField": true, "AddCustomFieldDef": true, "RemoveCustomFieldDef": true, "RenameCustomFieldDef": true,
	"CreateFolder": true, "StartService": true, "StopService": true, "RestartService": true,
	"UninstallService": true, "UpdateServicePolicy": true, "UpdateGraphicsConfig": true,
	"UpdateModuleOptionString": true, "UpdatePassthruConfig": true, "UpdateOptions": true, "EnableRuleset": true,
	"DisableRuleset": true, "ShutdownGuest": true, "RebootGuest": true, "StandbyGuest": true,
	"MarkAsTemplate": true, "MarkAsVirtualMachine": true, "UnregisterVM": true, "RenameCustomizationSpec": true,
	"ChangeLockdownMode": true, "EnterLockdownMode": true, "ExitLockdownMode": true, "UpdateLockdownExceptions": true,
	"RefreshGraphicsManager": true, "RefreshServices": true,
}

// journal counts the calls of writing methods and the tasks created, per method.
type journal struct {
	mu     sync.Mutex
	writes map[string]int
	tasks  map[string]int
	seen   map[string]bool // tasks counted (vcsim puts a task more than once)
}

func newJournal() *journal {
	return &journal{writes: map[string]int{}, tasks: map[string]int{}, seen: map[string]bool{}}
}

func (j *journal) call(method string) {
	if !writeMethods[method] && !strings.HasSuffix(method, "_Task") {
		return
	}
	j.mu.Lock()
	j.writes[method]++
	j.mu.Unlock()
}

func (j *journal) task(ref, name string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.seen[ref] {
		j.seen[ref] = true
		j.tasks[name]++
	}
}

func (j *journal) counts() (map[string]int, map[string]int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	w, t := map[string]int{}, map[string]int{}
	for k, v := range j.writes {
		w[k] = v
	}
	for k, v := range j.tasks {
		t[k] = v
	}
	return w, t
}

type vmState struct {
	Name          string `json:"name"`
	Power         string `json:"power"`
	ChangeVersion string `json:"changeVersion"`
	Template      bool   `json:"template"`
}

type fieldDef struct {
	Key  int32  `json:"key"`
	Name string `json:"name"`
	Type string `json:"type"`
}

type farmState struct {
	Hosts   []farm.HostInfo              `json:"hosts"`
	Fields  []fieldDef                   `json:"customFields"`
	Values  map[string]map[string]string `json:"customValues"` // moref value -> attribute name -> value
	Folders []string                     `json:"folders"`      // "moref name parent", sorted
	VMs     map[string]vmState           `json:"vms"`          // by moref value
	Tasks   map[string]int               `json:"tasks"`        // tasks created, per method
	Writes  map[string]int               `json:"writes"`       // calls of methods that change something
}

func (s *Sim) registerState() {
	s.HandleControl("GET /gpusim/state", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, s.state())
	})
}

func (s *Sim) state() farmState {
	ctx := &simulator.Context{Map: s.ctx.Map}
	st := farmState{Hosts: s.Farm.Hosts(), Values: map[string]map[string]string{}, VMs: map[string]vmState{}}
	sort.Slice(st.Hosts, func(i, j int) bool { return st.Hosts[i].Name < st.Hosts[j].Name })
	names := map[int32]string{}
	cfm := ctx.Map.CustomFieldsManager()
	ctx.Map.WithLock(ctx, cfm, func() {
		for _, f := range cfm.Field {
			st.Fields = append(st.Fields, fieldDef{f.Key, f.Name, f.ManagedObjectType})
			names[f.Key] = f.Name
		}
	})
	for _, kind := range []string{"VirtualMachine", "HostSystem", "Folder", "Datacenter", "ClusterComputeResource"} {
		for _, obj := range ctx.Map.All(kind) {
			ctx.Map.WithLock(ctx, obj, func() { s.noteEntity(&st, obj, names) })
		}
	}
	sort.Strings(st.Folders)
	st.Writes, st.Tasks = s.journal.counts()
	return st
}

// noteEntity adds one entity's custom values, and a folder's or VM's own state (its lock held).
func (s *Sim) noteEntity(st *farmState, obj mo.Entity, names map[int32]string) {
	e := obj.Entity()
	ref := obj.Reference().Value
	for _, v := range e.CustomValue {
		if sv, ok := v.(*types.CustomFieldStringValue); ok {
			if st.Values[ref] == nil {
				st.Values[ref] = map[string]string{}
			}
			st.Values[ref][names[sv.Key]] = sv.Value
		}
	}
	switch o := obj.(type) {
	case *simulator.Folder:
		parent := ""
		if o.Parent != nil {
			parent = o.Parent.Value
		}
		st.Folders = append(st.Folders, ref+" "+o.Name+" "+parent)
	case *simulator.VirtualMachine:
		v := vmState{Name: o.Name, Power: string(o.Runtime.PowerState)}
		if o.Config != nil {
			v.ChangeVersion, v.Template = o.Config.ChangeVersion, o.Config.Template
		}
		st.VMs[ref] = v
	}
}
