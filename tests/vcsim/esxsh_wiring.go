package main

// Wiring of the ESXi shell (internal/esxsh) to the GPU farm (internal/farm): the farm-backed
// esxsh.Backend, the SSH flags, the files written next to the env (known_hosts, host map) and the
// control routes under /gpusim/ssh.

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"

	"gpusim/internal/esxsh"
	"gpusim/internal/farm"
	"gpusim/internal/vc"
)

// sshFlags are gpusim's SSH options.
type sshFlags struct {
	disabled       bool
	user           string
	authorizedKeys string
	portBase       int
}

// addSSHFlags registers the SSH options on fs.
func addSSHFlags(fs *flag.FlagSet) *sshFlags {
	f := &sshFlags{}
	fs.BoolVar(&f.disabled, "no-ssh", false, "do not serve the ESXi shell over SSH")
	fs.StringVar(&f.user, "ssh-user", "root", "login name of the simulated ESXi hosts (password: gpusim's password)")
	fs.StringVar(&f.authorizedKeys, "ssh-authorized-keys", "", "authorized_keys file whose keys may log in to every host")
	fs.IntVar(&f.portBase, "ssh-port-base", 0, "first SSH port (host i, by name, gets base+i); 0 = free ports")
	return f
}

// startESXiShell starts the SSH endpoints of every farm host and writes ssh_known_hosts and
// ssh_hosts.json into outDir (next to the env file). stateDir keeps the host keys across restarts.
func startESXiShell(f *farm.Farm, fl *sshFlags, password, stateDir, outDir string, logf func(string, ...any)) (*esxsh.Server, error) {
	var keys []ssh.PublicKey
	if fl.authorizedKeys != "" {
		var err error
		if keys, err = readAuthorizedKeys(fl.authorizedKeys); err != nil {
			return nil, err
		}
	}
	srv := esxsh.New(esxsh.Config{
		Backend: &farmBackend{farm: f}, User: fl.user, Password: password, AuthorizedKeys: keys,
		StateDir: stateDir, PortBase: fl.portBase, Logf: logf,
	})
	if err := srv.Start(); err != nil {
		_ = srv.Close()
		return nil, err
	}
	if err := srv.Refresh(); err != nil { // hosts whose SSH service starts stopped
		_ = srv.Close()
		return nil, err
	}
	f.Subscribe(func(e farm.Event) {
		if e.What == "ssh" { // StartService / StopService through vSphere, or the control endpoint
			if err := srv.Refresh(); err != nil && logf != nil {
				logf("refresh %s: %v", e.Host, err)
			}
		}
	})
	if err := writeSSHFiles(srv, outDir, stateDir); err != nil {
		_ = srv.Close()
		return nil, err
	}
	return srv, nil
}

// writeSSHFiles writes ssh_known_hosts and ssh_hosts.json next to the env file; without one, into the
// state directory, else into a temporary directory removed when the server stops.
func writeSSHFiles(srv *esxsh.Server, outDir, stateDir string) error {
	if outDir == "" {
		outDir = stateDir
	}
	if outDir == "" {
		dir, err := os.MkdirTemp("", "gpusim-ssh-")
		if err != nil {
			return err
		}
		srv.RemoveOnClose(dir)
		outDir = dir
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	_, _, err := srv.WriteFiles(outDir)
	return err
}

func readAuthorizedKeys(path string) ([]ssh.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ssh authorized keys: %w", err)
	}
	var keys []ssh.PublicKey
	for len(strings.TrimSpace(string(data))) > 0 {
		key, _, _, rest, err := ssh.ParseAuthorizedKey(data)
		if err != nil {
			return nil, fmt.Errorf("ssh authorized keys %s: %w", path, err)
		}
		keys = append(keys, key)
		data = rest
	}
	return keys, nil
}

// sshEnv is what gpusim adds to the environment it prints: its own GPUSIM_SSH_* names, and the same values
// under the VGPUCTL_ESXI_* names vgpuctl reads (the line `vgpuctl sim up` prints), so that a shell that
// evals gpusim's line runs host changes over the simulated ESXi shells as well.
func sshEnv(srv *esxsh.Server, password string) [][2]string {
	info := srv.Info()
	env := [][2]string{{"GPUSIM_SSH_USER", info.User}}
	if info.KnownHosts != "" {
		env = append(env, [2]string{"GPUSIM_SSH_KNOWN_HOSTS", info.KnownHosts})
	}
	if info.HostMap != "" {
		env = append(env, [2]string{"GPUSIM_SSH_HOSTS", info.HostMap})
	}
	env = append(env, [2]string{"VGPUCTL_ESXI_USER", info.User})
	if info.KnownHosts != "" {
		env = append(env, [2]string{"VGPUCTL_ESXI_KNOWN_HOSTS", info.KnownHosts})
	}
	if info.HostMap != "" {
		env = append(env, [2]string{"VGPUCTL_ESXI_HOSTS", info.HostMap})
	}
	return append(env, [2]string{"VGPUCTL_ESXI_PASSWORD", password})
}

// sshControlRoutes are the control routes of the SSH side, by pattern, for gpusim's /gpusim/ mux.
func sshControlRoutes(srv *esxsh.Server) map[string]http.Handler {
	h := srv.ControlHandler("/gpusim/ssh")
	return map[string]http.Handler{"/gpusim/ssh": h, "/gpusim/ssh/": h}
}

// farmBackend is the esxsh.Backend over the farm: the shell and the vSphere API share one state.
type farmBackend struct {
	farm *farm.Farm
}

func (b *farmBackend) HostNames() []string {
	var names []string
	for _, h := range b.farm.Hosts() {
		names = append(names, h.Name)
	}
	return names
}

func (b *farmBackend) Reachable(name string) bool { return b.farm.Reachable(name) }

// Listening: the host's SSH service (TSM-SSH) runs.
func (b *farmBackend) Listening(name string) bool {
	a, err := b.farm.Access(name)
	return err == nil && a.SSHRunning
}

// Login applies lockdown mode: only exception users keep SSH access.
func (b *farmBackend) Login(name, user string) (bool, string) { return b.farm.ShellLogin(name, user) }

// Host is the farm's own snapshot: the shell derives what nvidia-smi shows from it (esxsh.View).
func (b *farmBackend) Host(name string) (farm.HostInfo, error) { return b.farm.Host(name) }

// VIBs are the packages the vSphere side lists for the host, as esxcli's rows.
func (b *farmBackend) VIBs(name string) ([][]string, error) {
	info, err := b.farm.Host(name)
	if err != nil {
		return nil, err
	}
	return vc.VIBLines(info.Access), nil
}

// Apply is every write of the shell: a GPU mode through the farm's one GPU write, module options as
// HostKernelModuleSystem sets them, components installed from a depot (software_wiring.go).
func (b *farmBackend) Apply(host string, c esxsh.Change) (esxsh.Applied, error) {
	switch c := c.(type) {
	case esxsh.GPUChange:
		outcome, err := b.farm.SetGPU(host, c.PCIID, c.Setting)
		return esxsh.Applied{Outcome: outcome}, err
	case esxsh.ModuleChange:
		return esxsh.Applied{Outcome: farm.PendingReboot}, b.farm.SetModuleOptions(host, c.Module, c.Options)
	case esxsh.InstallChange:
		res, err := b.install(host, c.Depot, c.Names)
		return esxsh.Applied{Outcome: farm.PendingReboot, Install: res}, err
	}
	return esxsh.Applied{}, fmt.Errorf("change %T: %w", c, farm.ErrInvalid)
}
