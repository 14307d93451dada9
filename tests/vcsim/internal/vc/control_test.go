package vc

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/fault"
)

func (e *env) control(method, path string, body any) (int, map[string]any) {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		r = bytes.NewReader(data)
	}
	u := *e.sim.URL
	u.User, u.Path = nil, path
	req, err := http.NewRequest(method, u.String(), r)
	e.must(err)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	res, err := client.Do(req)
	e.must(err)
	defer res.Body.Close()
	out := map[string]any{}
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

func TestControlAssignments(t *testing.T) {
	e := start(t, smallSpec())
	vm := e.vm("vm-a")
	e.must(e.addVGPUs(vm, "grid_a100-20c"))
	e.must(e.wait(vm.PowerOn(e.ctx)))
	code, out := e.control("GET", "/gpusim/assignments", nil)
	list, _ := out["assignments"].([]any)
	if code != 200 || len(list) != 1 {
		t.Fatalf("%d %v", code, out)
	}
	a := list[0].(map[string]any)
	if a["vmName"] != "vm-a" || a["host"] != host1 || a["gpu"] != "0000:3b:00.0" || a["profile"] != "grid_a100-20c" {
		t.Fatalf("unexpected assignment %v", a)
	}
	code, out = e.control("GET", "/gpusim/hosts/"+host1, nil)
	if code != 200 || out["name"] != host1 {
		t.Fatalf("%d %v", code, out)
	}
	code, _ = e.control("GET", "/gpusim/hosts/nope", nil)
	if code != 400 {
		t.Fatalf("unknown host: %d", code)
	}
	code, _ = e.control("GET", "/gpusim/nothing-here", nil)
	if code != 404 {
		t.Fatalf("unknown endpoint: %d", code)
	}
}

func TestControlArmFault(t *testing.T) {
	e := start(t, smallSpec())
	code, out := e.control("POST", "/gpusim/faults", map[string]any{
		"object": "vm-a", "method": "PowerOnVM_Task", "fault": "SystemError", "count": 1, "message": "injected"})
	if code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	vm := e.vm("vm-a")
	f, msg := faultOf(e.wait(vm.PowerOn(e.ctx)))
	if _, ok := f.(*types.SystemError); !ok || msg != "injected" {
		t.Fatalf("armed fault: %#v %q", f, msg)
	}
	e.must(e.wait(vm.PowerOn(e.ctx))) // only the next call fails

	// a non-task method gets a SOAP fault
	code, _ = e.control("POST", "/gpusim/faults", map[string]any{"object": host1, "method": "QueryModules", "fault": "HostCommunication"})
	if code != 200 {
		t.Fatal(code)
	}
	if _, err := e.kernel(host1).modules(); err == nil {
		t.Fatal("armed QueryModules fault did not fire")
	}
	if _, err := e.kernel(host1).modules(); err != nil {
		t.Fatalf("second QueryModules: %v", err)
	}

	for _, bad := range []map[string]any{
		{"object": "nope", "method": "PowerOnVM_Task", "fault": "SystemError"},
		{"object": "vm-a", "method": "PowerOnVM_Task", "fault": "NoSuchFault"},
		{"object": "vm-a", "fault": "SystemError"},
		{"object": "vm-a", "method": "PowerOnVM_Task", "fault": "SystemError", "extra": 1},
	} {
		code, out := e.control("POST", "/gpusim/faults", bad)
		if code != 400 || out["error"] == "" {
			t.Fatalf("%v: %d %v", bad, code, out)
		}
	}
	code, out = e.control("GET", "/gpusim/faults", nil)
	if code != 200 || out["faults"] != nil {
		t.Fatalf("faults left: %v", out)
	}
}

func TestControlDelay(t *testing.T) {
	e := start(t, smallSpec())
	code, _ := e.control("POST", "/gpusim/delays", map[string]any{"object": "vm-a", "method": "PowerOnVM_Task", "seconds": 0.3})
	if code != 200 {
		t.Fatal(code)
	}
	vm := e.vm("vm-a")
	task, err := vm.PowerOn(e.ctx)
	e.must(err)
	var tm mo.Task
	e.must(task.Properties(e.ctx, task.Reference(), []string{"info"}, &tm))
	if tm.Info.State == types.TaskInfoStateSuccess {
		t.Fatal("delayed task finished at once")
	}
	e.must(task.Wait(e.ctx))
	code, _ = e.control("POST", "/gpusim/delays", map[string]any{"object": "vm-a", "method": "PowerOnVM_Task", "seconds": 0})
	if code != 400 {
		t.Fatalf("zero delay: %d", code)
	}
}

func TestControlFollowupChangesTheVMBeforeTheTaskReports(t *testing.T) {
	e := start(t, smallSpec())
	arm := func(method string, cpus int) {
		body := map[string]any{"object": "vm-a", "method": method, "numCPUs": cpus}
		if code, out := e.control("POST", "/gpusim/followups", body); code != 200 {
			t.Fatalf("%v: %d %v", body, code, out)
		}
	}
	arm("ReconfigVM_Task", 6)
	vm := e.vm("vm-a")
	before := e.vmMO(vm, "config.changeVersion").Config.ChangeVersion
	e.must(e.wait(vm.Reconfigure(e.ctx, types.VirtualMachineConfigSpec{MemoryMB: 2048})))
	m := e.vmMO(vm, "config.hardware", "config.changeVersion")
	if m.Config.Hardware.NumCPU != 6 || m.Config.Hardware.MemoryMB != 2048 || m.Config.ChangeVersion == before {
		t.Fatalf("after the task: %d vCPUs, %d MB, changeVersion %s (was %s)", m.Config.Hardware.NumCPU,
			m.Config.Hardware.MemoryMB, m.Config.ChangeVersion, before)
	}
	e.must(e.wait(vm.Reconfigure(e.ctx, types.VirtualMachineConfigSpec{NumCPUs: 2}))) // armed once
	if n := e.vmMO(vm, "config.hardware").Config.Hardware.NumCPU; n != 2 {
		t.Fatalf("a second reconfigure got the followup too: %d vCPUs", n)
	}
	e.must(e.wait(vm.PowerOn(e.ctx)))
	arm("PowerOffVM_Task", 4)
	e.must(e.wait(vm.PowerOff(e.ctx)))
	if n := e.vmMO(vm, "config.hardware").Config.Hardware.NumCPU; n != 4 {
		t.Fatalf("after the power-off's followup: %d vCPUs", n)
	}
	arm("CloneVM_Task", 3)
	task, err := vm.Clone(e.ctx, e.folders().VmFolder, "cloned", types.VirtualMachineCloneSpec{})
	e.must(e.wait(task, err))
	if n, m := e.vmMO(e.vm("cloned"), "config.hardware").Config.Hardware.NumCPU, e.vmMO(vm, "config.hardware").Config.Hardware.NumCPU; n != 3 || m != 4 {
		t.Fatalf("after the clone's followup: the clone has %d vCPUs, its source %d", n, m)
	}
	for _, bad := range []map[string]any{
		{"object": "vm-a", "method": "PowerOnVM_Task", "numCPUs": 6},
		{"object": "vm-a", "method": "ReconfigVM_Task"},
		{"object": "nope", "method": "ReconfigVM_Task", "numCPUs": 6},
	} {
		if code, out := e.control("POST", "/gpusim/followups", bad); code != 400 || out["error"] == "" {
			t.Fatalf("%v: %d %v", bad, code, out)
		}
	}
}

func TestControlGuestAndHostDown(t *testing.T) {
	e := start(t, smallSpec())
	code, _ := e.control("POST", "/gpusim/vms/vm-a/guest", map[string]any{"ip": "10.0.0.5", "state": "running", "hostname": "a"})
	if code != 200 {
		t.Fatal(code)
	}
	m := e.vmMO(e.vm("vm-a"), "guest", "summary.guest")
	if m.Guest.IpAddress != "10.0.0.5" || m.Guest.GuestState != "running" || m.Summary.Guest.IpAddress != "10.0.0.5" {
		t.Fatalf("guest %+v", m.Guest)
	}
	for _, path := range []string{"/gpusim/vms/nope/guest", "/gpusim/hosts/nope/down"} {
		code, out := e.control("POST", path, map[string]any{"ip": "1.2.3.4"})
		if code != 400 || out["error"] == "" {
			t.Fatalf("%s: %d %v", path, code, out)
		}
	}
	code, _ = e.control("POST", "/gpusim/vms/vm-a/guest", map[string]any{"state": "flying"})
	if code != 400 {
		t.Fatalf("bad state: %d", code)
	}

	code, out := e.control("POST", "/gpusim/hosts/"+host1+"/down", nil)
	if code != 200 || out["connectionState"] != "notResponding" {
		t.Fatalf("%d %v", code, out)
	}
	if st := e.hostMO(host1, "runtime.connectionState").Runtime.ConnectionState; st != types.HostSystemConnectionStateNotResponding {
		t.Fatalf("host is %s", st)
	}
	_, err := e.vm("vm-a").PowerOn(e.ctx)
	if _, ok := soapFault(err).(types.HostNotConnected); !ok {
		t.Fatalf("power on with host down: %v", err)
	}
	code, _ = e.control("POST", "/gpusim/hosts/"+host1+"/up", nil)
	if code != 200 {
		t.Fatal(code)
	}
	e.must(e.wait(e.vm("vm-a").PowerOn(e.ctx)))
}

func TestBadSOAPRequestsGetFaults(t *testing.T) {
	e := start(t, smallSpec())
	// a method the object does not have
	_, err := methods.QueryModules(e.ctx, e.c.Client, &types.QueryModules{This: e.host(host1).Reference()})
	if _, ok := soapFault(err).(types.MethodNotFound); !ok {
		t.Fatalf("expected MethodNotFound, got %v", err)
	}
	// an object that does not exist
	_, err = methods.QueryModules(e.ctx, e.c.Client, &types.QueryModules{
		This: types.ManagedObjectReference{Type: "HostKernelModuleSystem", Value: "nope"}})
	if _, ok := soapFault(err).(types.ManagedObjectNotFound); !ok {
		t.Fatalf("expected ManagedObjectNotFound, got %v", err)
	}
	// references of the wrong kind
	bad := types.ManagedObjectReference{Type: "HostSystem", Value: "host-nope"}
	for i := 0; i < 2; i++ { // twice: a failed call must not leave a lock held
		_, err = methods.QueryConfigTarget(e.ctx, e.c.Client, &types.QueryConfigTarget{
			This: *e.browser(), Host: &bad})
		if _, ok := soapFault(err).(types.InvalidArgument); !ok {
			t.Fatalf("QueryConfigTarget with a bad host: %v", err)
		}
	}
	_, err = e.vm("vm-a").Clone(e.ctx, e.folders().VmFolder, "x", types.VirtualMachineCloneSpec{
		Location: types.VirtualMachineRelocateSpec{Host: &bad}})
	if _, ok := soapFault(err).(types.InvalidArgument); !ok {
		t.Fatalf("clone to a bad host: %v", err)
	}
	e.configTarget(host1)
	// garbage XML
	u := *e.sim.URL
	u.User = nil
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	res, err := client.Post(u.String(), "text/xml", strings.NewReader("<Envelope><Body><Nope/></Body>"))
	e.must(err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 500 || !strings.Contains(string(body), "Fault") {
		t.Fatalf("garbage request: %d %s", res.StatusCode, body)
	}
	// a panic in a handler is a SystemError fault
	h := fault.Recover(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	rec := &recorder{header: http.Header{}}
	h.ServeHTTP(rec, &http.Request{})
	if rec.code != 500 || !strings.Contains(rec.body.String(), "SystemError") {
		t.Fatalf("panic: %d %s", rec.code, rec.body.String())
	}
	var _ = soap.Fault{}
	_ = context.Background()
}

type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(code int)        { r.code = code }

func TestControlRebootFaults(t *testing.T) {
	const gpu0, opts = "0000:3b:00.0", "NVreg_NvLinkDisable=1"
	cases := []struct {
		name   string
		body   map[string]any
		clear  bool // DELETE the fault before rebooting
		faulty int  // reboots that leave the changes unapplied
		mig    bool // MIG change refused on those reboots
		mods   bool // module options not in effect after those reboots
	}{
		{name: "mig", body: map[string]any{"ignore": []string{"mig"}}, faulty: 1, mig: true},
		{name: "modules", body: map[string]any{"ignore": []string{"modules"}, "count": 1}, faulty: 1, mods: true},
		{name: "both twice", body: map[string]any{"ignore": []string{"modules", "mig"}, "count": 2}, faulty: 2, mig: true, mods: true},
		{name: "cleared", body: map[string]any{"ignore": []string{"mig"}}, clear: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, smallSpec())
			code, out := e.control("POST", "/gpusim/hosts/"+host1+"/reboot-faults", tc.body)
			if code != 200 {
				t.Fatalf("arm: %d %v", code, out)
			}
			if _, out = e.control("GET", "/gpusim/hosts/"+host1, nil); out["rebootFault"] == nil {
				t.Fatalf("armed fault not shown: %v", out)
			}
			if tc.clear {
				if code, out = e.control("DELETE", "/gpusim/hosts/"+host1+"/reboot-faults", nil); code != 200 {
					t.Fatalf("clear: %d %v", code, out)
				}
			}
			e.must(e.wait(e.host(host1).EnterMaintenanceMode(e.ctx, 0, false, nil)))
			for i := 0; i <= tc.faulty; i++ {
				_, err := e.sim.Farm.SetMIGMode(host1, gpu0, true)
				e.must(err)
				e.must(e.kernel(host1).update("nvidia", opts))
				e.must(e.reboot(host1))
				e.waitConnected(host1)
				faulty := i < tc.faulty
				g, err := e.sim.Farm.GPU(host1, gpu0)
				e.must(err)
				if refused := faulty && tc.mig; g.MIGCurrent == refused || g.MIGPending == refused {
					t.Fatalf("reboot %d: MIG current %v pending %v, refused %v", i+1, g.MIGCurrent, g.MIGPending, refused)
				}
				mo, err := e.sim.Farm.ModuleOptions(host1, "nvidia")
				e.must(err)
				if ignored := faulty && tc.mods; (mo.Effective == opts) == ignored || mo.Configured != opts {
					t.Fatalf("reboot %d: module options %+v, ignored %v", i+1, mo, ignored)
				}
			}
			if _, out = e.control("GET", "/gpusim/hosts/"+host1, nil); out["rebootFault"] != nil {
				t.Fatalf("fault not consumed: %v", out["rebootFault"])
			}
		})
	}
}

func TestControlRebootFaultsBadRequests(t *testing.T) {
	e := start(t, smallSpec())
	cases := []struct {
		method, host string
		body         any
		want         string
	}{
		{"POST", "nope", map[string]any{"ignore": []string{"mig"}}, `host "nope"`},
		{"POST", host1, map[string]any{"ignore": []string{"nvlink"}}, `unknown ignore "nvlink"`},
		{"POST", host1, map[string]any{"ignore": []string{}}, "ignore must name"},
		{"POST", host1, map[string]any{"ignore": []string{"mig"}, "count": -1}, "must be at least 1"},
		{"POST", host1, map[string]any{"ignore": []string{"mig"}, "extra": 1}, "invalid JSON body"},
		{"DELETE", "nope", nil, `host "nope"`},
	}
	for _, tc := range cases {
		code, out := e.control(tc.method, "/gpusim/hosts/"+tc.host+"/reboot-faults", tc.body)
		msg, _ := out["error"].(string)
		if code != 400 || !strings.Contains(msg, tc.want) {
			t.Errorf("%s %s %v: %d %v, want 400 with %q", tc.method, tc.host, tc.body, code, out, tc.want)
		}
	}
	if _, out := e.control("GET", "/gpusim/hosts/"+host1, nil); out["rebootFault"] != nil {
		t.Fatalf("a refused request armed a fault: %v", out["rebootFault"])
	}
}

func stateOf(e *env) map[string]any {
	e.t.Helper()
	code, out := e.control("GET", "/gpusim/state", nil)
	if code != 200 {
		e.t.Fatalf("state: %d %v", code, out)
	}
	return out
}

func TestStateShowsWhatClientsWrote(t *testing.T) {
	e := start(t, smallSpec())
	before := stateOf(e)
	if _, ok := before["vms"].(map[string]any)[e.vm("vm-a").Reference().Value]; !ok {
		t.Fatalf("no vm-a: %v", before["vms"])
	}
	// reads change nothing
	e.vmMO(e.vm("vm-a"), "config.changeVersion", "customValue")
	e.hostMO(host1, "config.service")
	if after := stateOf(e); !reflect.DeepEqual(before, after) {
		t.Fatalf("a read changed the state:\n%v\n%v", before, after)
	}
	cfm := object.NewCustomFieldsManager(e.c.Client)
	def, err := cfm.Add(e.ctx, "probe", "VirtualMachine", nil, nil)
	e.must(err)
	e.must(cfm.Set(e.ctx, e.vm("vm-a").Reference(), def.Key, "v"))
	_, err = e.folders().VmFolder.CreateFolder(e.ctx, "made")
	e.must(err)
	e.must(e.wait(e.vm("vm-a").PowerOn(e.ctx)))
	after := stateOf(e)
	values := after["customValues"].(map[string]any)[e.vm("vm-a").Reference().Value].(map[string]any)
	if values["probe"] != "v" {
		t.Fatalf("custom values: %v", after["customValues"])
	}
	writes, tasks := after["writes"].(map[string]any), after["tasks"].(map[string]any)
	for _, m := range []string{"AddCustomFieldDef", "SetField", "CreateFolder", "PowerOnVM_Task"} {
		if writes[m] != float64(1) {
			t.Errorf("%s not counted: %v", m, writes)
		}
	}
	if count(tasks, "PowerOnVM_Task") <= count(before["tasks"].(map[string]any), "PowerOnVM_Task") {
		t.Errorf("tasks: %v before %v", tasks, before["tasks"])
	}
	if len(after["folders"].([]any)) != len(before["folders"].([]any))+1 {
		t.Errorf("folders: %v", after["folders"])
	}
	if after["vms"].(map[string]any)[e.vm("vm-a").Reference().Value].(map[string]any)["power"] != "poweredOn" {
		t.Errorf("vms: %v", after["vms"])
	}
}

func count(m map[string]any, key string) float64 {
	n, _ := m[key].(float64)
	return n
}
