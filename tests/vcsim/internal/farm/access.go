package farm

import (
	"fmt"
	"slices"
)

// How a host is reached and what it runs beside its GPUs: the NVIDIA vGPU Manager installed, the SSH
// service (HostServiceSystem, service TSM-SSH) and lockdown mode (HostAccessManager). Shared by the vSphere
// side (which reports and changes them) and the ESXi shell (which refuses connections while SSH is stopped
// and logins of users not on the exception list while the host is in lockdown mode).

// DefaultManager is the vGPU Manager version a host has unless its spec says otherwise (vGPU 17.3, R550).
const DefaultManager = "550.90.05"

// NoManager in HostSpec.Manager: the host has no vGPU Manager (its GPUs offer no vGPU types).
const NoManager = "none"

// SSH service policies (HostService.policy).
const (
	SSHPolicyOn        = "on"
	SSHPolicyOff       = "off"
	SSHPolicyAutomatic = "automatic"
)

// Lockdown modes (HostAccessManager.lockdownMode).
const (
	LockdownDisabled = "lockdownDisabled"
	LockdownNormal   = "lockdownNormal"
	LockdownStrict   = "lockdownStrict"
)

// Access is a host's SSH service, lockdown mode and vGPU Manager.
type Access struct {
	Manager            string   `json:"vgpuManager"`      // vGPU Manager version running, "" when none is installed
	Installed          string   `json:"installedManager"` // installed (the package list): runs from the next reboot
	SSHRunning         bool     `json:"sshRunning"`
	SSHPolicy          string   `json:"sshPolicy"` // on | off | automatic
	Lockdown           string   `json:"lockdown"`
	LockdownExceptions []string `json:"lockdownExceptions"`
}

// AccessSpec is how a host starts (HostSpec.Access); zero values are the defaults: the default vGPU Manager,
// SSH running with policy on, lockdown disabled.
type AccessSpec struct {
	Manager            string // "" = DefaultManager, NoManager = none
	SSHStopped         bool
	SSHPolicy          string
	Lockdown           string
	LockdownExceptions []string
}

func (s AccessSpec) access(hostName string) (Access, error) {
	a := Access{Manager: s.Manager, SSHRunning: !s.SSHStopped, SSHPolicy: s.SSHPolicy, Lockdown: s.Lockdown,
		LockdownExceptions: slices.Clone(s.LockdownExceptions)}
	switch a.Manager {
	case "":
		a.Manager = DefaultManager
	case NoManager:
		a.Manager = ""
	}
	a.Installed = a.Manager
	if a.SSHPolicy == "" {
		a.SSHPolicy = SSHPolicyOn
		if s.SSHStopped {
			a.SSHPolicy = SSHPolicyOff
		}
	}
	if err := checkPolicy(a.SSHPolicy); err != nil {
		return a, fmt.Errorf("host %s: %w", hostName, err)
	}
	if a.Lockdown == "" {
		a.Lockdown = LockdownDisabled
	}
	if err := checkLockdown(a.Lockdown); err != nil {
		return a, fmt.Errorf("host %s: %w", hostName, err)
	}
	return a, nil
}

func checkPolicy(p string) error {
	if p != SSHPolicyOn && p != SSHPolicyOff && p != SSHPolicyAutomatic {
		return fmt.Errorf("ssh policy must be on, off or automatic, got %q: %w", p, ErrInvalid)
	}
	return nil
}

func checkLockdown(mode string) error {
	if mode != LockdownDisabled && mode != LockdownNormal && mode != LockdownStrict {
		return fmt.Errorf("lockdown mode must be %s, %s or %s, got %q: %w", LockdownDisabled, LockdownNormal,
			LockdownStrict, mode, ErrInvalid)
	}
	return nil
}

// Access returns a host's access state.
func (f *Farm) Access(hostName string) (Access, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, err := f.host(hostName)
	if err != nil {
		return Access{}, err
	}
	a := h.access
	a.LockdownExceptions = slices.Clone(a.LockdownExceptions)
	return a, nil
}

// SetSSHRunning starts or stops a host's SSH service.
func (f *Farm) SetSSHRunning(hostName string, running bool) error {
	return f.change(hostName, "ssh", func(h *host) error { h.access.SSHRunning = running; return nil })
}

// SetSSHPolicy sets the SSH service's startup policy (on, off, automatic).
func (f *Farm) SetSSHPolicy(hostName, policy string) error {
	if err := checkPolicy(policy); err != nil {
		return err
	}
	return f.change(hostName, "ssh", func(h *host) error { h.access.SSHPolicy = policy; return nil })
}

// SetLockdown sets a host's lockdown mode and, when exceptions is not nil, its exception users.
func (f *Farm) SetLockdown(hostName, mode string, exceptions []string) error {
	if err := checkLockdown(mode); err != nil {
		return err
	}
	return f.change(hostName, "lockdown", func(h *host) error {
		h.access.Lockdown = mode
		if exceptions != nil {
			h.access.LockdownExceptions = slices.Clone(exceptions)
		}
		return nil
	})
}

// SetManager installs a vGPU Manager version on a host ("" removes it); the GPUs offer vGPU types only
// with one installed.
func (f *Farm) SetManager(hostName, version string) error {
	return f.change(hostName, "manager", func(h *host) error {
		h.access.Manager, h.access.Installed = version, version
		return nil
	})
}

// ShellLogin reports whether user may log in to the host's ESXi shell: the SSH service runs and, in
// lockdown mode, the user is on the exception list (vSphere Security, "Lockdown Mode Behavior").
func (f *Farm) ShellLogin(hostName, user string) (bool, string) {
	a, err := f.Access(hostName)
	switch {
	case err != nil:
		return false, err.Error()
	case !a.SSHRunning:
		return false, "the SSH service is stopped"
	case a.Lockdown != LockdownDisabled && !slices.Contains(a.LockdownExceptions, user):
		return false, "the host is in " + a.Lockdown + " and " + user + " is not an exception user"
	}
	return true, ""
}
