package main

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gpusim/internal/esxsh"
	"gpusim/internal/farm"
)

func newTestFarm(t *testing.T) *farm.Farm {
	t.Helper()
	f := farm.New(nil)
	for _, spec := range []farm.HostSpec{
		{Name: "esx-a100", Model: "A100-40GB", GPUs: 2, NVLink: "pairs", DefaultGraphicsType: farm.GraphicsSharedDirect},
		{Name: "esx-h100", Model: "H100-80GB", GPUs: 2, NVLink: "none", DefaultGraphicsType: farm.GraphicsSharedDirect},
		{Name: "esx-l40s", Model: "L40S", GPUs: 1},
	} {
		if err := f.AddHost(spec); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func mustRun(t *testing.T, sh *esxsh.Shell, host, cmd string, wantExit int) string {
	t.Helper()
	res := sh.Run(host, cmd)
	if res.Exit != wantExit {
		t.Fatalf("%s on %s: exit %d (want %d)\n%s%s", cmd, host, res.Exit, wantExit, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

func reboot(t *testing.T, f *farm.Farm, host string) {
	t.Helper()
	for _, step := range []func(string) error{
		func(h string) error { return f.SetMaintenance(h, true) }, f.BeginReboot, f.EndReboot,
		func(h string) error { return f.SetMaintenance(h, false) },
	} {
		if err := step(host); err != nil {
			t.Fatal(err)
		}
	}
}

// A MIG switch in the shell reaches the vSphere side's state through the farm: A100 after a reboot,
// H100 at once.
func TestShellMIGSwitchFlowsIntoFarm(t *testing.T) {
	f := newTestFarm(t)
	sh := &esxsh.Shell{Backend: &farmBackend{farm: f}}

	out := mustRun(t, sh, "esx-a100", "nvidia-smi -i 0 -mig 1", 0)
	if !strings.Contains(out, "pending enable state for GPU 00000000:3B:00.0:Not Supported") {
		t.Fatalf("A100 enable: %q", out)
	}
	g, _ := f.GPU("esx-a100", "0000:3b:00.0")
	if g.MIGCurrent || !g.MIGPending || g.VgpuMode == farm.ModeMIG || slices.Contains(g.Profiles, "grid_a100-3-20c") {
		t.Fatalf("before reboot: %+v", g)
	}
	mustRun(t, sh, "esx-a100", "nvidia-smi mig -lgip", 6)
	if got := mustRun(t, sh, "esx-a100", "nvidia-smi --query-gpu=mig.mode.current,mig.mode.pending --format=csv,noheader", 0); got != "Disabled, Enabled\nDisabled, Disabled\n" {
		t.Errorf("csv before reboot %q", got)
	}

	reboot(t, f, "esx-a100")
	g, _ = f.GPU("esx-a100", "0000:3b:00.0")
	if !g.MIGCurrent || g.VgpuMode != farm.ModeMIG || !slices.Contains(g.Profiles, "grid_a100-3-20c") || slices.Contains(g.Profiles, "grid_a100-40c") {
		t.Fatalf("after reboot: %+v", g)
	}
	if got := mustRun(t, sh, "esx-a100", "nvidia-smi mig -lgip", 0); !strings.Contains(got, "|   0  MIG 3g.20gb        9     2/2") || strings.Contains(got, "|   1  MIG") {
		t.Errorf("lgip after reboot:\n%s", got)
	}

	out = mustRun(t, sh, "esx-h100", "nvidia-smi -i 1 -mig 1", 0)
	if out != "Enabled MIG Mode for GPU 00000000:3C:00.0\nAll done.\n" {
		t.Errorf("H100 enable: %q", out)
	}
	if g, _ := f.GPU("esx-h100", "0000:3c:00.0"); !g.MIGCurrent || g.VgpuMode != farm.ModeMIG {
		t.Errorf("H100 after enable: %+v", g)
	}
	if out := mustRun(t, sh, "esx-l40s", "nvidia-smi -i 0 -mig 1", 3); !strings.Contains(out, "Not Supported") {
		t.Errorf("L40S: %q", out)
	}
}

// ECC memory set in the shell is the farm's state: pending until the host reboots, then in effect; a reboot
// fault naming "ecc" leaves it unapplied.
func TestShellECCFlowsIntoFarm(t *testing.T) {
	f := newTestFarm(t)
	sh := &esxsh.Shell{Backend: &farmBackend{farm: f}}
	query := "nvidia-smi --query-gpu=ecc.mode.current,ecc.mode.pending --format=csv,noheader,nounits"
	if got := mustRun(t, sh, "esx-a100", query, 0); got != "Enabled, Enabled\nEnabled, Enabled\n" {
		t.Fatalf("at start %q", got)
	}
	if out := mustRun(t, sh, "esx-a100", "nvidia-smi -i 1 -e 0", 0); out != "Disabled ECC support for GPU 00000000:3C:00.0.\nAll done.\nReboot required.\n" {
		t.Fatalf("-e 0: %q", out)
	}
	if g, _ := f.GPU("esx-a100", "0000:3c:00.0"); !g.ECCCurrent || g.ECCPending {
		t.Fatalf("farm before reboot: %+v", g.GPUState)
	}
	if err := f.SetRebootFault("esx-a100", farm.RebootFault{Ignore: []string{"ecc"}, Count: 1}); err != nil {
		t.Fatal(err)
	}
	reboot(t, f, "esx-a100")
	if got := mustRun(t, sh, "esx-a100", query, 0); got != "Enabled, Enabled\nEnabled, Enabled\n" {
		t.Fatalf("after a refused reboot %q", got)
	}
	mustRun(t, sh, "esx-a100", "nvidia-smi -i 1 -e 0", 0)
	reboot(t, f, "esx-a100")
	if got := mustRun(t, sh, "esx-a100", query, 0); got != "Enabled, Enabled\nDisabled, Disabled\n" {
		t.Errorf("after reboot %q", got)
	}
	if got := mustRun(t, sh, "esx-a100", "nvidia-smi -q -i 1", 0); !strings.Contains(got, "    Ecc Mode\n        Current                           : Disabled\n") {
		t.Errorf("-q after reboot:\n%s", got)
	}
}

// NVLink follows the nvidia module options set with esxcli, after a reboot, like HostKernelModuleSystem.
func TestShellModuleOptionsAndNVLink(t *testing.T) {
	f := newTestFarm(t)
	sh := &esxsh.Shell{Backend: &farmBackend{farm: f}}
	if got := mustRun(t, sh, "esx-a100", "nvidia-smi topo -m", 0); !strings.Contains(got, "GPU0\t X \tNV12\t") {
		t.Fatalf("topo with NVLink:\n%s", got)
	}
	if got := mustRun(t, sh, "esx-a100", "nvidia-smi nvlink -s -i 1", 0); strings.Count(got, ": 25 GB/s") != 12 {
		t.Fatalf("nvlink -s:\n%s", got)
	}
	mustRun(t, sh, "esx-a100", `esxcli system module parameters set -m nvidia -p "NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x01"`, 0)
	if opts, _ := f.ModuleOptions("esx-a100", "nvidia"); opts.Configured != "NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x01" || opts.Effective != "" {
		t.Fatalf("farm options %+v", opts)
	}
	if got := mustRun(t, sh, "esx-a100", "esxcli system module parameters list -m nvidia", 0); !strings.Contains(got, "NVreg_RegistryDwords           string  RmPVMRL=0x01") {
		t.Errorf("list:\n%s", got)
	}
	if got := mustRun(t, sh, "esx-a100", "nvidia-smi nvlink -s", 0); strings.Contains(got, "inactive") {
		t.Errorf("NVLink down before reboot:\n%s", got)
	}
	reboot(t, f, "esx-a100")
	if got := mustRun(t, sh, "esx-a100", "nvidia-smi nvlink -s", 0); strings.Count(got, esxsh.AllLinksInactive) != 2 || strings.Contains(got, "GB/s") {
		t.Errorf("NVLink after reboot:\n%s", got)
	}
	if got := mustRun(t, sh, "esx-a100", "nvidia-smi topo -m", 0); strings.Contains(got, "\tNV12\t") {
		t.Errorf("topo after NVLink disabled:\n%s", got)
	}
	if g, _ := f.GPU("esx-a100", "0000:3b:00.0"); g.NVLinkUp || g.Scheduler.Policy != "equal-share" {
		t.Errorf("farm GPU: %+v", g)
	}
	if res := sh.Run("esx-a100", "esxcli system module parameters set -m nvidia -p novalue"); res.Exit != 1 || !strings.Contains(res.Stderr, "not key=value") {
		t.Errorf("bad option string: %+v", res)
	}
	if res := sh.Run("esx-a100", "esxcli system module parameters list -m nope"); res.Exit != 1 || !strings.Contains(res.Stderr, "Unable to find module nope") {
		t.Errorf("unknown module: %+v", res)
	}
}

func TestFarmBackendReachableAndView(t *testing.T) {
	f := newTestFarm(t)
	b := &farmBackend{farm: f}
	if !b.Reachable("esx-a100") || b.Reachable("nope") {
		t.Error("reachability")
	}
	_ = f.SetMaintenance("esx-a100", true)
	_ = f.BeginReboot("esx-a100")
	if b.Reachable("esx-a100") {
		t.Error("rebooting host reachable")
	}
	info, err := b.Host("esx-h100")
	if err != nil {
		t.Fatal(err)
	}
	h := esxsh.View(info)
	g := h.GPUs[1]
	if g.BusID != "00000000:3C:00.0" || g.Name != "NVIDIA H100 PCIe" || g.Architecture != "Hopper" || g.MemoryMiB != 81920 || !g.MIGCapable || len(g.NVLinks) != 18 || slices.ContainsFunc(g.NVLinks, func(l esxsh.Link) bool { return l.Up }) {
		t.Errorf("view %+v", g)
	}
	if h.GPUs[0].UUID == g.UUID || !strings.HasPrefix(g.UUID, "GPU-") {
		t.Errorf("uuids %s %s", h.GPUs[0].UUID, g.UUID)
	}
	if _, err := b.Host("nope"); err == nil {
		t.Error("unknown host")
	}
}

func TestStartESXiShellWritesFiles(t *testing.T) {
	f := newTestFarm(t)
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fl := addSSHFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}

	// Without env file and state dir: a temporary directory, removed on Close.
	srv, err := startESXiShell(f, fl, "pass", "", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	info := srv.Info()
	if len(info.Hosts) != 3 || info.User != "root" {
		t.Fatalf("info %+v", info)
	}
	env := map[string]string{}
	for _, kv := range sshEnv(srv, "pass") {
		env[kv[0]] = kv[1]
	}
	for _, p := range []string{env["GPUSIM_SSH_KNOWN_HOSTS"], env["GPUSIM_SSH_HOSTS"]} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("env names %q: %v", p, err)
		}
	}
	// the names vgpuctl reads, with the same values (what `vgpuctl sim up` prints)
	same := map[string]string{"VGPUCTL_ESXI_HOSTS": "GPUSIM_SSH_HOSTS", "VGPUCTL_ESXI_KNOWN_HOSTS": "GPUSIM_SSH_KNOWN_HOSTS",
		"VGPUCTL_ESXI_USER": "GPUSIM_SSH_USER"}
	for ours, theirs := range same {
		if env[ours] == "" || env[ours] != env[theirs] {
			t.Errorf("%s = %q, %s = %q", ours, env[ours], theirs, env[theirs])
		}
	}
	if env["VGPUCTL_ESXI_PASSWORD"] != "pass" {
		t.Errorf("VGPUCTL_ESXI_PASSWORD = %q", env["VGPUCTL_ESXI_PASSWORD"])
	}
	_ = srv.Close()
	if _, err := os.Stat(env["GPUSIM_SSH_HOSTS"]); !os.IsNotExist(err) {
		t.Errorf("temporary files left after Close: %v", err)
	}

	// Next to the env file, host keys in the state dir.
	out, state := t.TempDir(), t.TempDir()
	srv, err = startESXiShell(f, fl, "pass", state, out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.Info().KnownHosts != filepath.Join(out, "ssh_known_hosts") {
		t.Errorf("known_hosts at %s", srv.Info().KnownHosts)
	}
	if keys, _ := filepath.Glob(filepath.Join(state, "ssh-hostkeys", "*.key")); len(keys) != 3 {
		t.Errorf("host keys in state dir: %v", keys)
	}
	if routes := sshControlRoutes(srv); routes["/gpusim/ssh"] == nil || routes["/gpusim/ssh/"] == nil {
		t.Errorf("routes %v", routes)
	}
}

func TestAuthorizedKeysFlag(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	_ = os.WriteFile(good, []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBRPGpEv+NxUDFegRublyvzkdn4AXOdJq/fAi3LPd5+B a\n\n"+
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJnQSOjna8WOsV7EpYuyCKW7HyiXhwgNZX737/gNj+sB b\n"), 0o600)
	bad := filepath.Join(dir, "bad")
	_ = os.WriteFile(bad, []byte("not a key\n"), 0o600)
	if keys, err := readAuthorizedKeys(good); err != nil || len(keys) != 2 {
		t.Errorf("good file: %d keys, %v", len(keys), err)
	}
	for _, p := range []string{bad, filepath.Join(dir, "missing")} {
		if _, err := readAuthorizedKeys(p); err == nil {
			t.Errorf("%s accepted", p)
		}
		fl := &sshFlags{user: "root", authorizedKeys: p}
		if _, err := startESXiShell(newTestFarm(t), fl, "pass", "", "", nil); err == nil {
			t.Errorf("startESXiShell with %s succeeded", p)
		}
	}
}

// A host whose nvidia module does not declare a parameter leaves it out of esxcli's list.
func TestUndeclaredNvidiaParameter(t *testing.T) {
	f := farm.New(nil)
	if err := f.AddHost(farm.HostSpec{Name: "old", Model: "A100-40GB", GPUs: 2, UndeclaredParams: []string{"NVreg_NvLinkDisable"}}); err != nil {
		t.Fatal(err)
	}
	if err := f.AddHost(farm.HostSpec{Name: "new", Model: "A100-40GB", GPUs: 2}); err != nil {
		t.Fatal(err)
	}
	sh := &esxsh.Shell{Backend: &farmBackend{farm: f}}
	if got := mustRun(t, sh, "old", "esxcli system module parameters list -m nvidia", 0); strings.Contains(got, "NVreg_NvLinkDisable") ||
		!strings.Contains(got, "NVreg_RegistryDwords") {
		t.Errorf("old driver lists:\n%s", got)
	}
	if got := mustRun(t, sh, "new", "esxcli system module parameters list -m nvidia", 0); !strings.Contains(got, "NVreg_NvLinkDisable") {
		t.Errorf("new driver lists:\n%s", got)
	}
}

// An NVSwitch host's GPUs show NV<links> to every other GPU of the fabric.
func TestNVSwitchTopology(t *testing.T) {
	f := farm.New(nil)
	if err := f.AddHost(farm.HostSpec{Name: "hgx", Model: "H100-SXM5-80GB", GPUs: 8, DefaultGraphicsType: farm.GraphicsSharedDirect}); err != nil {
		t.Fatal(err)
	}
	sh := &esxsh.Shell{Backend: &farmBackend{farm: f}}
	got := mustRun(t, sh, "hgx", "nvidia-smi topo -m", 0)
	if strings.Count(got, "NV18") != 8*7 {
		t.Errorf("topo on an 8-GPU NVSwitch host:\n%s", got)
	}
}

// A bridged H100 PCIe pair lists what the real host in tests/fixtures/nvidia-smi/h100-pcie.nvlink-s.txt lists: 18
// links per GPU, the 12 the bridge wires up and 6 <inactive> (the capture's indentation is spaces where nvidia-smi
// prints a tab, and its UUIDs are the real GPUs'); topo says NV12; an unbridged GPU prints NVML's "all links are
// inActive" line instead of link lines.
func TestH100PCIeNVLinkListingMatchesARealHost(t *testing.T) {
	f := farm.New(nil)
	for _, spec := range []farm.HostSpec{
		{Name: "bridged", Model: "H100-80GB", GPUs: 2, NVLink: "pairs", DefaultGraphicsType: farm.GraphicsSharedDirect},
		{Name: "single", Model: "H100-80GB", GPUs: 1, DefaultGraphicsType: farm.GraphicsSharedDirect},
	} {
		if err := f.AddHost(spec); err != nil {
			t.Fatal(err)
		}
	}
	sh := &esxsh.Shell{Backend: &farmBackend{farm: f}}
	info, err := (&farmBackend{farm: f}).Host("bridged")
	if err != nil {
		t.Fatal(err)
	}
	h := esxsh.View(info)
	data, err := os.ReadFile(filepath.Join("..", "fixtures", "nvidia-smi", "h100-pcie.nvlink-s.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer("GPU-6968dfc2-d444-d92c-c36b-6abe53445cb9", h.GPUs[0].UUID,
		"GPU-9b1446e2-8a89-4cf6-b68c-a98d99e958d3", h.GPUs[1].UUID, "         Link", "\t Link").Replace(string(data))
	if got := mustRun(t, sh, "bridged", "nvidia-smi nvlink -s", 0); got != want {
		t.Errorf("nvlink -s differs from the capture\n--- got ---\n%s--- want ---\n%s", got, want)
	}
	if got := mustRun(t, sh, "bridged", "nvidia-smi topo -m", 0); !strings.Contains(got, "GPU0\t X \tNV12\t") {
		t.Errorf("topo:\n%s", got)
	}
	got := mustRun(t, sh, "single", "nvidia-smi nvlink -s", 0)
	if lines := strings.Split(strings.TrimSpace(got), "\n"); len(lines) != 2 || lines[1] != esxsh.AllLinksInactive {
		t.Errorf("unbridged GPU:\n%s", got)
	}
}
