package vc

import (
	"net/url"
	"strings"
	"testing"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

func TestSoftwarePackagesListTheVgpuManager(t *testing.T) {
	spec := smallSpec()
	spec.Clusters = append(spec.Clusters, ClusterSpec{Name: "Bare", Hosts: 1, GPUs: 2, Model: "A100-40GB",
		GraphicsType: farm.GraphicsSharedDirect, VgpuManager: farm.NoManager})
	e := start(t, spec)
	for host, want := range map[string]string{"esx-01.gpu.sim": farm.DefaultManager + vibSuffix, "esx-03.gpu.sim": ""} {
		h := e.hostMO(host, "configManager.imageConfigManager", "config.sharedPassthruGpuTypes")
		res, err := methods.FetchSoftwarePackages(e.ctx, e.c.Client, &types.FetchSoftwarePackages{This: *h.ConfigManager.ImageConfigManager})
		e.must(err)
		got := ""
		for _, p := range res.Returnval {
			if p.Name == managerVIB {
				got = p.Version
			}
		}
		if got != want {
			t.Errorf("%s: vGPU Manager package %q, want %q", host, got, want)
		}
		if offers := len(h.Config.SharedPassthruGpuTypes) > 0; offers != (want != "") {
			t.Errorf("%s: offers vGPU types %v with manager %q", host, h.Config.SharedPassthruGpuTypes, want)
		}
	}
}

func TestSSHServiceFollowsStartAndStop(t *testing.T) {
	spec := smallSpec()
	spec.Clusters[0].SSH = SSHAccessSpec{Stopped: true}
	e := start(t, spec)
	running := func() (bool, string) {
		h := e.hostMO("esx-01.gpu.sim", "config.service")
		for _, s := range h.Config.Service.Service {
			if s.Key == sshServiceKey {
				return s.Running, s.Policy
			}
		}
		t.Fatal("no TSM-SSH service")
		return false, ""
	}
	if on, policy := running(); on || policy != "off" {
		t.Fatalf("stopped farm: running=%v policy=%s", on, policy)
	}
	h := e.host("esx-01.gpu.sim")
	svc, err := h.ConfigManager().ServiceSystem(e.ctx)
	e.must(err)
	e.must(svc.Start(e.ctx, sshServiceKey))
	if on, _ := running(); !on {
		t.Fatal("StartService did not start SSH")
	}
	if a, _ := e.sim.Farm.Access("esx-01.gpu.sim"); !a.SSHRunning {
		t.Fatal("the farm (and so the ESXi shell) did not see the start")
	}
	e.must(svc.Stop(e.ctx, sshServiceKey))
	if on, _ := running(); on {
		t.Fatal("StopService did not stop SSH")
	}
	if err := svc.Start(e.ctx, "nosuchservice"); err == nil {
		t.Fatal("an unknown service started")
	}
}

func TestLockdownModeIsReportedAndItsExceptionsListed(t *testing.T) {
	spec := smallSpec()
	spec.Clusters[0].SSH = SSHAccessSpec{Lockdown: farm.LockdownNormal, LockdownExceptions: []string{"svc-vgpu"}}
	e := start(t, spec)
	h := e.hostMO("esx-01.gpu.sim", "config.lockdownMode", "configManager.hostAccessManager")
	if h.Config.LockdownMode != types.HostLockdownModeLockdownNormal {
		t.Fatalf("config.lockdownMode %q", h.Config.LockdownMode)
	}
	var acc mo.HostAccessManager
	e.must(e.c.RetrieveOne(e.ctx, *h.ConfigManager.HostAccessManager, []string{"lockdownMode"}, &acc))
	if acc.LockdownMode != types.HostLockdownModeLockdownNormal {
		t.Fatalf("HostAccessManager.lockdownMode %q", acc.LockdownMode)
	}
	res, err := methods.QueryLockdownExceptions(e.ctx, e.c.Client, &types.QueryLockdownExceptions{This: acc.Self})
	e.must(err)
	if strings.Join(res.Returnval, ",") != "svc-vgpu" {
		t.Fatalf("exceptions %v", res.Returnval)
	}
	if ok, why := e.sim.Farm.ShellLogin("esx-01.gpu.sim", "root"); ok || !strings.Contains(why, "lockdownNormal") {
		t.Fatalf("root logs in under lockdown: %v %q", ok, why)
	}
	if ok, _ := e.sim.Farm.ShellLogin("esx-01.gpu.sim", "svc-vgpu"); !ok {
		t.Fatal("an exception user cannot log in")
	}
}

func limitedClient(t *testing.T, e *env, user User) *govmomi.Client {
	t.Helper()
	u := *e.sim.URL
	u.User = url.UserPassword(user.Name, user.Password)
	c, err := govmomi.NewClient(e.ctx, &u, true)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLimitedUserIsRefusedPerMethodAndToldTheTruthByHasPrivilege(t *testing.T) {
	spec := smallSpec()
	viewer := User{Name: "viewer", Password: "secret", Privileges: []string{"VirtualMachine.Interact.PowerOn"}}
	spec.Users = []User{viewer}
	e := start(t, spec)
	c := limitedClient(t, e, viewer)
	host := e.hostMO("esx-01.gpu.sim", "configManager.graphicsManager", "configManager.kernelModuleSystem")
	// a read works (System.Read), a host setting does not
	var gm mo.HostGraphicsManager
	e.must(c.RetrieveOne(e.ctx, *host.ConfigManager.GraphicsManager, []string{"graphicsConfig"}, &gm))
	_, err := methods.QueryConfiguredModuleOptionString(e.ctx, c.Client, &types.QueryConfiguredModuleOptionString{
		This: *host.ConfigManager.KernelModuleSystem, Name: "nvidia"})
	perm, ok := soapFault(err).(types.NoPermission)
	if !ok || perm.PrivilegeId != "Host.Config.Settings" {
		t.Fatalf("QueryConfiguredModuleOptionString as viewer: %v", err)
	}
	// PowerOn is granted, PowerOff is not
	vm := object.NewVirtualMachine(c.Client, e.vm("vm-a").Reference())
	if _, err := vm.PowerOff(e.ctx); err == nil {
		t.Fatal("viewer powered a VM off")
	}
	auth := object.NewAuthorizationManager(c.Client)
	session, err := c.SessionManager.UserSession(e.ctx)
	e.must(err)
	res, err := methods.HasPrivilegeOnEntities(e.ctx, c.Client, &types.HasPrivilegeOnEntities{This: auth.Reference(),
		Entity: []types.ManagedObjectReference{vm.Reference()}, SessionId: session.Key,
		PrivId: []string{"VirtualMachine.Interact.PowerOn", "VirtualMachine.Interact.PowerOff", "System.Read"}})
	e.must(err)
	got := map[string]bool{}
	for _, a := range res.Returnval[0].PrivAvailability {
		got[a.PrivId] = a.IsGranted
	}
	if !got["VirtualMachine.Interact.PowerOn"] || got["VirtualMachine.Interact.PowerOff"] || !got["System.Read"] {
		t.Fatalf("HasPrivilegeOnEntities: %v", got)
	}
	// the main user still has everything
	res, err = methods.HasPrivilegeOnEntities(e.ctx, e.c.Client, &types.HasPrivilegeOnEntities{This: auth.Reference(),
		Entity: []types.ManagedObjectReference{vm.Reference()}, PrivId: []string{"VirtualMachine.Interact.PowerOff"}})
	e.must(err)
	if !res.Returnval[0].PrivAvailability[0].IsGranted {
		t.Fatal("the main user lost a privilege")
	}
}

func TestWrongPasswordOfALimitedUserIsRefused(t *testing.T) {
	spec := smallSpec()
	spec.Users = []User{{Name: "viewer", Password: "secret"}}
	e := start(t, spec)
	u := *e.sim.URL
	u.User = url.UserPassword("viewer", "wrong")
	if _, err := govmomi.NewClient(e.ctx, &u, true); err == nil {
		t.Fatal("wrong password accepted")
	}
}

func TestRDMADevicesPerCluster(t *testing.T) {
	spec := smallSpec()
	spec.Clusters[0].RDMADevices = 2
	e := start(t, spec)
	h := e.hostMO("esx-01.gpu.sim", "config.network.rdmaDevice")
	if n := len(h.Config.Network.RdmaDevice); n != 2 || h.Config.Network.RdmaDevice[0].Device != "vmrdma0" {
		t.Fatalf("rdma devices %+v", h.Config.Network.RdmaDevice)
	}
}

func TestLimitedUserCannotFetchPackagesWithoutHostConfigImage(t *testing.T) {
	spec := smallSpec()
	viewer := User{Name: "viewer", Password: "secret"}
	spec.Users = []User{viewer}
	e := start(t, spec)
	c := limitedClient(t, e, viewer)
	h := e.hostMO("esx-01.gpu.sim", "configManager.imageConfigManager")
	_, err := methods.FetchSoftwarePackages(e.ctx, c.Client, &types.FetchSoftwarePackages{This: *h.ConfigManager.ImageConfigManager})
	if perm, ok := soapFault(err).(types.NoPermission); !ok || perm.PrivilegeId != "Host.Config.Image" {
		t.Fatalf("FetchSoftwarePackages as viewer: %v", err)
	}
}
