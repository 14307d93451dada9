package guests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/vc"
)

// fakeHook records the hook calls; guest i gets 10.9.0.(10+i). Start blocks while `hold` is set.
type fakeHook struct {
	mu      sync.Mutex
	calls   []string
	failFor map[int]error
	hold    chan struct{}
}

func (h *fakeHook) record(call string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, call)
}

func (h *fakeHook) Calls() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.calls...)
}

func (h *fakeHook) Start(ctx context.Context, index int, hostname string) (string, error) {
	h.record(fmt.Sprintf("start %d %s", index, hostname))
	if h.hold != nil {
		<-h.hold
	}
	if err := h.failFor[index]; err != nil {
		return "", err
	}
	return fmt.Sprintf("10.9.0.%d", 10+index), nil
}

func (h *fakeHook) Stop(ctx context.Context, index int) error {
	h.record(fmt.Sprintf("stop %d", index))
	return nil
}

func (h *fakeHook) Remove(ctx context.Context, index int) error {
	h.record(fmt.Sprintf("remove %d", index))
	return nil
}

func (h *fakeHook) Down(ctx context.Context) error {
	h.record("down")
	return nil
}

type env struct {
	t       *testing.T
	sim     *vc.Sim
	m       *Manager
	hook    *fakeHook
	finder  *find.Finder
	ctx     context.Context
	mu      sync.Mutex
	reports []string // "VM-REF STATE IP", in order
}

func (e *env) report(ref types.ManagedObjectReference, r vc.GuestReport) error {
	e.mu.Lock()
	e.reports = append(e.reports, strings.TrimSpace(ref.Value+" "+r.State+" "+r.IP))
	e.mu.Unlock()
	return e.sim.ReportGuest(ref, r)
}

func (e *env) reportsOf(vm *object.VirtualMachine) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, r := range e.reports {
		if strings.HasPrefix(r, vm.Reference().Value+" ") {
			out = append(out, strings.TrimPrefix(r, vm.Reference().Value+" "))
		}
	}
	return out
}

func start(t *testing.T, hook *fakeHook) *env {
	t.Helper()
	spec := vc.DefaultSpec()
	spec.Clusters[0].Hosts = 1
	spec.VMs = []vc.VMSpec{{Name: "vm-a", MemoryMB: 4096}, {Name: "vm b", MemoryMB: 4096},
		{Name: "running", MemoryMB: 4096, PowerOn: true}}
	sim, err := vc.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	e := &env{t: t, sim: sim, hook: hook, ctx: context.Background()}
	e.m = New(hook, e.report, t.Logf)
	e.m.Watch(sim.Context().Map)
	t.Cleanup(func() { _ = e.m.Close(context.Background()) })
	ctx := e.ctx
	c, err := govmomi.NewClient(ctx, sim.URL, true)
	if err != nil {
		t.Fatal(err)
	}
	f := find.NewFinder(c.Client, true)
	dc, err := f.Datacenter(ctx, spec.Datacenter)
	if err != nil {
		t.Fatal(err)
	}
	f.SetDatacenter(dc)
	e.finder = f
	return e
}

func (e *env) vm(name string) *object.VirtualMachine {
	e.t.Helper()
	vm, err := e.finder.VirtualMachine(e.ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return vm
}

func (e *env) do(task *object.Task, err error) {
	e.t.Helper()
	if err == nil {
		err = task.Wait(e.ctx)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	e.m.WaitIdle()
}

func (e *env) guest(name string) mo.VirtualMachine {
	e.t.Helper()
	var m mo.VirtualMachine
	vm := e.vm(name)
	if err := vm.Properties(e.ctx, vm.Reference(), []string{"guest", "summary.guest"}, &m); err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) wantRunning(name, ip, hostname string) {
	e.t.Helper()
	m := e.guest(name)
	g := m.Guest
	if g.GuestState != "running" || g.IpAddress != ip || g.HostName != hostname ||
		g.ToolsRunningStatus != string(types.VirtualMachineToolsRunningStatusGuestToolsRunning) ||
		g.ToolsStatus != types.VirtualMachineToolsStatusToolsOk ||
		g.GuestOperationsReady == nil || !*g.GuestOperationsReady {
		e.t.Fatalf("%s: guest %+v, want running at %s as %s", name, g, ip, hostname)
	}
	if len(g.Net) != 1 || len(g.Net[0].IpAddress) != 1 || g.Net[0].IpAddress[0] != ip || !g.Net[0].Connected {
		e.t.Fatalf("%s: guest.net %+v", name, g.Net)
	}
	if m.Summary.Guest == nil || m.Summary.Guest.IpAddress != ip {
		e.t.Fatalf("%s: summary.guest %+v", name, m.Summary.Guest)
	}
}

func (e *env) wantNotRunning(name string) {
	e.t.Helper()
	g := e.guest(name).Guest
	if g.GuestState != "notRunning" || g.IpAddress != "" || len(g.Net) != 0 ||
		g.ToolsRunningStatus != string(types.VirtualMachineToolsRunningStatusGuestToolsNotRunning) ||
		(g.GuestOperationsReady != nil && *g.GuestOperationsReady) {
		e.t.Fatalf("%s: guest %+v, want not running without an address", name, g)
	}
}

func (e *env) wantCalls(want ...string) {
	e.t.Helper()
	if got := e.hook.Calls(); strings.Join(got, "; ") != strings.Join(want, "; ") {
		e.t.Fatalf("hook calls %q, want %q", got, want)
	}
}

func TestPowerEventsStartStopAndRemoveGuests(t *testing.T) {
	e := start(t, &fakeHook{})
	e.m.WaitIdle()
	e.wantCalls("start 1 running") // powered on before the guests were attached
	e.wantRunning("running", "10.9.0.11", "running")

	e.do(e.vm("vm-a").PowerOn(e.ctx))
	e.wantRunning("vm-a", "10.9.0.12", "vm-a")
	e.do(e.vm("vm b").PowerOn(e.ctx)) // not a host name: the guest's own
	e.wantRunning("vm b", "10.9.0.13", "guest3")

	e.do(e.vm("vm-a").PowerOff(e.ctx))
	e.wantNotRunning("vm-a")
	e.do(e.vm("vm-a").PowerOn(e.ctx)) // the same guest (its disk) again
	e.wantRunning("vm-a", "10.9.0.12", "vm-a")
	e.do(e.vm("vm-a").Reset(e.ctx))
	e.wantRunning("vm-a", "10.9.0.12", "vm-a")
	e.do(e.vm("vm b").Suspend(e.ctx))
	e.wantNotRunning("vm b")
	e.wantCalls("start 1 running", "start 2 vm-a", "start 3 guest3", "stop 2", "start 2 vm-a", "stop 2",
		"start 2 vm-a", "stop 3")

	e.do(e.vm("vm-a").PowerOff(e.ctx))
	e.do(e.vm("vm-a").Destroy(e.ctx))
	if calls := e.hook.Calls(); calls[len(calls)-1] != "remove 2" {
		t.Fatalf("destroy: hook calls %q", calls)
	}
	var indexes []int
	for _, g := range e.m.Guests() {
		indexes = append(indexes, g.Index)
	}
	if fmt.Sprint(indexes) != "[1 3]" {
		t.Fatalf("guests %+v after the destroy", e.m.Guests())
	}
	if err := e.m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if calls := e.hook.Calls(); calls[len(calls)-1] != "down" {
		t.Fatalf("close: hook calls %q", calls)
	}
	e.m.PoweredOn(e.vm("running").Reference(), "running") // closed: ignored
	if calls := e.hook.Calls(); calls[len(calls)-1] != "down" {
		t.Fatalf("after close: hook calls %q", calls)
	}
}

func TestAFailedStartLeavesTheGuestNotRunning(t *testing.T) {
	e := start(t, &fakeHook{failFor: map[int]error{2: errors.New("sshd did not come up")}})
	e.do(e.vm("vm-a").PowerOn(e.ctx))
	e.wantNotRunning("vm-a")
	var got Info
	for _, g := range e.m.Guests() {
		if g.VM == "vm-a" {
			got = g
		}
	}
	if got.State != "failed" || !strings.Contains(got.Error, "sshd did not come up") {
		t.Fatalf("guest %+v", got)
	}
}

func TestAStartOvertakenByAPowerOffReportsNothing(t *testing.T) {
	hook := &fakeHook{}
	e := start(t, hook)
	e.m.WaitIdle()
	hook.hold = make(chan struct{})
	vm := e.vm("vm-a")
	task, err := vm.PowerOn(e.ctx)
	if err == nil {
		err = task.Wait(e.ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	task, err = vm.PowerOff(e.ctx) // while the guest is still starting
	if err == nil {
		err = task.Wait(e.ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	close(hook.hold)
	e.m.WaitIdle()
	e.wantNotRunning("vm-a")
	// never reported running: the guest came up for a VM that was already off
	if got := strings.Join(e.reportsOf(vm), "; "); got != "notRunning; notRunning" {
		t.Fatalf("reports %q", got)
	}
}

func TestHostname(t *testing.T) {
	for vm, want := range map[string]string{"train-01": "train-01", "vm b": "guest7", "-x": "guest7",
		"x_y": "guest7", strings.Repeat("a", 64): "guest7", strings.Repeat("a", 63): strings.Repeat("a", 63)} {
		if got := Hostname(vm, 7); got != want {
			t.Errorf("Hostname(%q) = %q, want %q", vm, got, want)
		}
	}
}

func TestScript(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	script := filepath.Join(dir, "hook.sh")
	body := `#!/bin/sh
echo "$* $GUEST_X" >> ` + log + `
case "$1 $3" in
  "start 1") echo "preparing"; echo "guest1 10.9.0.11" ;;
  "start 2") echo "no address here" ;;
  "start 3") echo "sshd did not come up" >&2; exit 1 ;;
esac
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Script{Path: script, Dir: "/guests", Env: []string{"GUEST_X=x"}, Timeout: 10 * 1e9}
	ctx := context.Background()
	if addr, err := s.Start(ctx, 1, "train-01"); err != nil || addr != "10.9.0.11" {
		t.Fatalf("start 1: %q %v", addr, err)
	}
	if _, err := s.Start(ctx, 2, "b"); err == nil || !strings.Contains(err.Error(), "no address") {
		t.Fatalf("start 2: %v", err)
	}
	if _, err := s.Start(ctx, 3, "c"); err == nil || !strings.Contains(err.Error(), "sshd did not come up") {
		t.Fatalf("start 3: %v", err)
	}
	for _, err := range []error{s.Stop(ctx, 1), s.Remove(ctx, 2), s.Down(ctx)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(log)
	want := "start /guests 1 train-01 x\nstart /guests 2 b x\nstart /guests 3 c x\nstop /guests 1 x\nremove /guests 2 x\ndown /guests x\n"
	if string(data) != want {
		t.Fatalf("hook runs:\n%s\nwant:\n%s", data, want)
	}
}
