package main

import (
	"flag"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"gpusim/internal/esxsh"
	"gpusim/internal/farm"
)

func accessShell(t *testing.T, f *farm.Farm) *esxsh.Server {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fl := addSSHFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	srv, err := startESXiShell(f, fl, "pass", "", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

func dialAs(srv *esxsh.Server, host, user string) error {
	c, err := ssh.Dial("tcp", srv.Endpoints()[host].Address, &ssh.ClientConfig{User: user,
		Auth: []ssh.AuthMethod{ssh.Password("pass")}, HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err == nil {
		_ = c.Close()
	}
	return err
}

// The SSH service started and stopped through the farm (vSphere's StartService / StopService) opens and
// closes the host's port; a host that starts with it stopped refuses from the beginning.
func TestSSHPortFollowsTheSSHService(t *testing.T) {
	f := farm.New(nil)
	for _, spec := range []farm.HostSpec{
		{Name: "esx-on", Model: "A100-40GB", GPUs: 1},
		{Name: "esx-off", Model: "A100-40GB", GPUs: 1, Access: farm.AccessSpec{SSHStopped: true}},
	} {
		if err := f.AddHost(spec); err != nil {
			t.Fatal(err)
		}
	}
	srv := accessShell(t, f)
	if err := dialAs(srv, "esx-on", "root"); err != nil {
		t.Fatalf("running service: %v", err)
	}
	if err := dialAs(srv, "esx-off", "root"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("stopped service: %v", err)
	}
	if err := f.SetSSHRunning("esx-off", true); err != nil {
		t.Fatal(err)
	}
	if err := dialAs(srv, "esx-off", "root"); err != nil {
		t.Fatalf("after start: %v", err)
	}
	if err := f.SetSSHRunning("esx-on", false); err != nil {
		t.Fatal(err)
	}
	if err := dialAs(srv, "esx-on", "root"); err == nil {
		t.Fatal("after stop the port still accepts")
	}
}

// In lockdown mode only the exception users log in (vSphere Security, "Lockdown Mode Behavior").
func TestLockdownRefusesUsersNotOnTheExceptionList(t *testing.T) {
	f := farm.New(nil)
	spec := farm.HostSpec{Name: "esx-ld", Model: "A100-40GB", GPUs: 1,
		Access: farm.AccessSpec{Lockdown: farm.LockdownNormal, LockdownExceptions: []string{"svc"}}}
	if err := f.AddHost(spec); err != nil {
		t.Fatal(err)
	}
	srv := accessShell(t, f)
	if err := dialAs(srv, "esx-ld", "root"); err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Fatalf("root under lockdown: %v", err)
	}
	if err := f.SetLockdown("esx-ld", farm.LockdownNormal, []string{"svc", "root"}); err != nil {
		t.Fatal(err)
	}
	if err := dialAs(srv, "esx-ld", "root"); err != nil {
		t.Fatalf("root as exception user: %v", err)
	}
}

// `esxcli software vib list` shows the vGPU Manager VIB as ESXi 8 prints it; without one, nvidia-smi is
// not found and the list has no NVIDIA row.
func TestVIBListShowsTheVgpuManager(t *testing.T) {
	f := farm.New(nil)
	for _, spec := range []farm.HostSpec{
		{Name: "esx-mgr", Model: "A100-40GB", GPUs: 1, Access: farm.AccessSpec{Manager: "535.161.05"}},
		{Name: "esx-bare", Model: "A100-40GB", GPUs: 1, Access: farm.AccessSpec{Manager: farm.NoManager}},
	} {
		if err := f.AddHost(spec); err != nil {
			t.Fatal(err)
		}
	}
	sh := &esxsh.Shell{Backend: &farmBackend{farm: f}}
	out := mustRun(t, sh, "esx-mgr", "esxcli software vib list", 0)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "Name ") || !strings.HasSuffix(lines[0], "Platforms") || !strings.HasPrefix(lines[1], "----") {
		t.Fatalf("header:\n%s", out)
	}
	if !strings.Contains(out, "NVD-AIE_ESXi_8.0.0_Driver  535.161.05-1OEM.800.1.0.20613240  NVD ") {
		t.Fatalf("no manager row:\n%s", out)
	}
	if bare := mustRun(t, sh, "esx-bare", "esxcli software vib list", 0); strings.Contains(bare, "NVD") {
		t.Fatalf("bare host lists NVIDIA VIBs:\n%s", bare)
	}
	mustRun(t, sh, "esx-bare", "nvidia-smi -L", 127)
	if got := mustRun(t, sh, "esx-mgr", "nvidia-smi -q", 0); !strings.Contains(got, "535.161.05") {
		t.Fatalf("nvidia-smi -q does not report the manager's driver version:\n%s", got)
	}
}
