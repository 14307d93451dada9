package farm

import (
	"errors"
	"testing"
)

func TestAccessDefaultsAndChanges(t *testing.T) {
	f := New(nil)
	if err := f.AddHost(HostSpec{Name: "h", Model: "A100-40GB", GPUs: 2}); err != nil {
		t.Fatal(err)
	}
	a, _ := f.Access("h")
	if a.Manager != DefaultManager || !a.SSHRunning || a.SSHPolicy != SSHPolicyOn || a.Lockdown != LockdownDisabled {
		t.Fatalf("defaults %+v", a)
	}
	if ok, _ := f.ShellLogin("h", "root"); !ok {
		t.Fatal("root cannot log in by default")
	}
	if err := f.SetManager("h", ""); err != nil {
		t.Fatal(err)
	}
	info, _ := f.Host("h")
	for _, g := range info.GPUs {
		if len(g.Profiles) != 0 {
			t.Fatalf("GPU %s offers %v without a vGPU Manager", g.PCIID, g.Profiles)
		}
	}
	if err := f.SetSSHRunning("h", false); err != nil {
		t.Fatal(err)
	}
	if ok, why := f.ShellLogin("h", "root"); ok || why != "the SSH service is stopped" {
		t.Fatalf("stopped SSH: %v %q", ok, why)
	}
	if err := f.SetLockdown("h", "lockdownSometimes", nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad lockdown mode: %v", err)
	}
	if err := f.SetSSHPolicy("h", "sometimes"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad policy: %v", err)
	}
}

func TestAccessSpecIsChecked(t *testing.T) {
	f := New(nil)
	err := f.AddHost(HostSpec{Name: "h", Model: "A100-40GB", GPUs: 1, Access: AccessSpec{Lockdown: "on"}})
	if err == nil {
		t.Fatal("a bad lockdown mode was accepted")
	}
	if err := f.AddHost(HostSpec{Name: "s", Model: "A100-40GB", GPUs: 1, Access: AccessSpec{SSHStopped: true}}); err != nil {
		t.Fatal(err)
	}
	if a, _ := f.Access("s"); a.SSHRunning || a.SSHPolicy != SSHPolicyOff {
		t.Fatalf("stopped SSH: %+v", a)
	}
}
