package vc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/task"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

type env struct {
	t      *testing.T
	sim    *Sim
	c      *govmomi.Client
	finder *find.Finder
	ctx    context.Context
}

func smallSpec() Spec {
	s := DefaultSpec()
	s.Clusters[0].Hosts = 2
	s.Clusters[0].RDMADevices = 0 // the tests add what they need
	s.RebootSeconds = 0.2
	s.VMs = []VMSpec{{Name: "vm-a", Host: "esx-01.gpu.sim", MemoryMB: 8192, Locked: true},
		{Name: "vm-b", Host: "esx-01.gpu.sim", MemoryMB: 8192, Locked: true}}
	return s
}

func start(t *testing.T, spec Spec) *env {
	t.Helper()
	sim, err := New(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	ctx := context.Background()
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
	return &env{t: t, sim: sim, c: c, finder: f, ctx: ctx}
}

func (e *env) vm(name string) *object.VirtualMachine {
	e.t.Helper()
	vm, err := e.finder.VirtualMachine(e.ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return vm
}

func (e *env) host(name string) *object.HostSystem {
	e.t.Helper()
	h, err := e.finder.HostSystem(e.ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

func (e *env) wait(t *object.Task, err error) error {
	if err != nil {
		return err
	}
	return t.Wait(e.ctx)
}

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// faultOf returns the task fault and its localized message.
func faultOf(err error) (types.BaseMethodFault, string) {
	var te task.Error
	if errors.As(err, &te) {
		return te.Fault(), te.LocalizedMessage
	}
	return nil, ""
}

func vgpuSpec(op types.VirtualDeviceConfigSpecOperation, profiles ...string) types.VirtualMachineConfigSpec {
	var spec types.VirtualMachineConfigSpec
	for i, p := range profiles {
		spec.DeviceChange = append(spec.DeviceChange, &types.VirtualDeviceConfigSpec{
			Operation: op, Device: newVGPU(int32(-10-i), p),
		})
	}
	return spec
}

func (e *env) addVGPUs(vm *object.VirtualMachine, profiles ...string) error {
	return e.wait(vm.Reconfigure(e.ctx, vgpuSpec(types.VirtualDeviceConfigSpecOperationAdd, profiles...)))
}

func (e *env) hostMO(name string, props ...string) mo.HostSystem {
	e.t.Helper()
	var h mo.HostSystem
	e.must(e.host(name).Properties(e.ctx, e.host(name).Reference(), props, &h))
	return h
}

func (e *env) vmMO(vm *object.VirtualMachine, props ...string) mo.VirtualMachine {
	e.t.Helper()
	var m mo.VirtualMachine
	e.must(vm.Properties(e.ctx, vm.Reference(), props, &m))
	return m
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

type graphicsMgr struct {
	e   *env
	ref types.ManagedObjectReference
}

func (g graphicsMgr) props() mo.HostGraphicsManager {
	var m mo.HostGraphicsManager
	g.e.must(property.DefaultCollector(g.e.c.Client).RetrieveOne(g.e.ctx, g.ref, nil, &m))
	return m
}

func (g graphicsMgr) update(cfg types.HostGraphicsConfig) error {
	_, err := methods.UpdateGraphicsConfig(g.e.ctx, g.e.c.Client, &types.UpdateGraphicsConfig{This: g.ref, Config: cfg})
	return err
}

func (g graphicsMgr) active() bool {
	res, err := methods.IsSharedGraphicsActive(g.e.ctx, g.e.c.Client, &types.IsSharedGraphicsActive{This: g.ref})
	g.e.must(err)
	return res.Returnval
}

func (g graphicsMgr) refresh() error {
	_, err := methods.RefreshGraphicsManager(g.e.ctx, g.e.c.Client, &types.RefreshGraphicsManager{This: g.ref})
	return err
}

func (e *env) graphics(name string) graphicsMgr {
	h := e.hostMO(name, "configManager")
	return graphicsMgr{e: e, ref: *h.ConfigManager.GraphicsManager}
}

type kernelMods struct {
	e   *env
	ref types.ManagedObjectReference
}

func (e *env) kernel(name string) kernelMods {
	h := e.hostMO(name, "configManager")
	return kernelMods{e: e, ref: *h.ConfigManager.KernelModuleSystem}
}

func (k kernelMods) modules() ([]types.KernelModuleInfo, error) {
	res, err := methods.QueryModules(k.e.ctx, k.e.c.Client, &types.QueryModules{This: k.ref})
	if err != nil {
		return nil, err
	}
	return res.Returnval, nil
}

func (k kernelMods) configured(name string) (string, error) {
	res, err := methods.QueryConfiguredModuleOptionString(k.e.ctx, k.e.c.Client,
		&types.QueryConfiguredModuleOptionString{This: k.ref, Name: name})
	if err != nil {
		return "", err
	}
	return res.Returnval, nil
}

func (k kernelMods) update(name, opts string) error {
	_, err := methods.UpdateModuleOptionString(k.e.ctx, k.e.c.Client,
		&types.UpdateModuleOptionString{This: k.ref, Name: name, Options: opts})
	return err
}

func (e *env) reboot(name string) error {
	h := e.host(name)
	res, err := methods.RebootHost_Task(e.ctx, e.c.Client, &types.RebootHost_Task{This: h.Reference(), Force: false})
	if err != nil {
		return err
	}
	return object.NewTask(e.c.Client, res.Returnval).Wait(e.ctx)
}

// browser returns the environment browser of the first host's cluster.
func (e *env) browser() *types.ManagedObjectReference {
	e.t.Helper()
	h := e.host(host1)
	var hm mo.HostSystem
	e.must(h.Properties(e.ctx, h.Reference(), []string{"parent"}, &hm))
	var cr mo.ComputeResource
	e.must(property.DefaultCollector(e.c.Client).RetrieveOne(e.ctx, *hm.Parent, []string{"environmentBrowser"}, &cr))
	return cr.EnvironmentBrowser
}

// configTarget queries the cluster's environment browser for one host.
func (e *env) configTarget(name string) *types.ConfigTarget {
	e.t.Helper()
	ref := e.host(name).Reference()
	res, err := methods.QueryConfigTarget(e.ctx, e.c.Client, &types.QueryConfigTarget{This: *e.browser(), Host: &ref})
	e.must(err)
	return res.Returnval
}
