package main

// Wiring of the ESXi shell (internal/esxsh) to the GPU farm (internal/farm): the farm-backed
// esxsh.Backend, the SSH flags, the files written next to the env (known_hosts, host map) and the
// control routes under /gpusim/ssh.

import (
	"crypto/sha256"
	"errors"
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

func (b *farmBackend) Host(name string) (esxsh.Host, error) {
	info, err := b.farm.Host(name)
	if err != nil {
		return esxsh.Host{}, err
	}
	h := hostView(info)
	h.VGPUs = b.vgpuView(name) // software_wiring.go
	return h, nil
}

func (b *farmBackend) SetMIGMode(host string, idx int, enable bool) (esxsh.MIGChange, error) {
	gpus, err := b.farm.GPUs(host)
	if err != nil {
		return 0, err
	}
	if idx < 0 || idx >= len(gpus) {
		return 0, fmt.Errorf("GPU %d: %w", idx, farm.ErrNotFound)
	}
	res, err := b.farm.SetMIGMode(host, gpus[idx].PCIID, enable)
	switch {
	case err != nil:
		return 0, err
	case res.Applied:
		return esxsh.MIGApplied, nil
	case gpus[idx].Model.MIGApply == "reboot":
		return esxsh.MIGPendingReset, nil
	}
	return esxsh.MIGPendingBusy, nil
}

func (b *farmBackend) SetECCMode(host string, idx int, enable bool) error {
	gpus, err := b.farm.GPUs(host)
	if err != nil {
		return err
	}
	if idx < 0 || idx >= len(gpus) {
		return fmt.Errorf("GPU %d: %w", idx, farm.ErrNotFound)
	}
	return b.farm.SetECCMode(host, gpus[idx].PCIID, enable)
}

func (b *farmBackend) ModuleOptions(host, module string) (string, bool, error) {
	opts, err := b.farm.ModuleOptions(host, module)
	if errors.Is(err, farm.ErrNotFound) {
		if _, herr := b.farm.Host(host); herr != nil {
			return "", false, herr
		}
		return "", false, nil
	}
	// esxcli shows the configured string (what the next boot uses), like the real host.
	return opts.Configured, err == nil, err
}

func (b *farmBackend) SetModuleOptions(host, module, options string) error {
	return b.farm.SetModuleOptions(host, module, options)
}

// architecture names a board's GPU architecture from its vGPU board token (h100* Hopper, l* Ada
// Lovelace, a* Ampere).
func architecture(board string) string {
	switch {
	case strings.HasPrefix(board, "h"):
		return "Hopper"
	case strings.HasPrefix(board, "l"):
		return "Ada Lovelace"
	}
	return "Ampere"
}

// gpuNVLinks lists a GPU's NVLinks as `nvidia-smi nvlink -s` does: every link the board lists (catalogue
// `listed`), of which the ones its bridge or baseboard wires (`links`) go to its peers and are up while NVLink is
// on; the rest stay <inactive>. A board the catalogue gives no link counts for lists none. Which link numbers a
// bridge wires varies between hosts; gpusim lays them out as the H100 PCIe capture in tests/fixtures/nvidia-smi
// shows them (18 listed in three blocks of six, the first four of each block wired), whatever the board.
func gpuNVLinks(m *farm.Model, g farm.GPUInfo, topology string, index map[string]int, speed float64) ([]esxsh.Link, []int) {
	if m.NVLinkLinks == 0 {
		return nil, nil
	}
	wired := wiredLinks(m.NVLinkListed, m.NVLinkLinks)
	peers := len(g.NVLinkPeers)
	var links []esxsh.Link
	var switchPeers []int
	k := 0 // wired links handed out so far
	for i, w := range wired {
		l := esxsh.Link{Index: i, Peer: -1, SpeedGBs: speed}
		if w && peers > 0 {
			l.Up = g.NVLinkUp
			if topology != farm.NVLinkNVSwitch { // a bridge: the wired links are split evenly among the peers
				l.Peer = index[g.NVLinkPeers[min(k/max(m.NVLinkLinks/peers, 1), peers-1)]]
			}
			k++
		}
		links = append(links, l)
	}
	if topology == farm.NVLinkNVSwitch { // every link goes to the NVSwitch fabric, which reaches every GPU of the set
		for _, peer := range g.NVLinkPeers {
			switchPeers = append(switchPeers, index[peer])
		}
	}
	return links, switchPeers
}

// wiredLinks says which of the listed links are wired: blocks of listed/3 links with the first wired/3 of each
// wired when both divide by three (the H100 PCIe capture: 0-3, 6-9, 12-15 of 18), else the first `wired`.
func wiredLinks(listed, wired int) []bool {
	out := make([]bool, listed)
	block, per := listed, wired
	if wired < listed && listed%3 == 0 && wired%3 == 0 {
		block, per = listed/3, wired/3
	}
	for i := range out {
		out[i] = i%block < per
	}
	return out
}

// linkSpeed is the per-link NVLink bandwidth nvidia-smi prints by architecture (NVLink 3 / NVLink 4).
var linkSpeed = map[string]float64{"Ampere": 25, "Hopper": 26.562}

// migProfiles are a board's GPU instance profiles from the catalogue, with nvidia-smi's columns.
func migProfiles(m *farm.Model) []esxsh.GIProfile {
	var out []esxsh.GIProfile
	for _, p := range m.GIProfiles {
		out = append(out, esxsh.NewGIProfile(architecture(m.Board), m.FramebufferGB, p.Name, p.ID, p.MemoryGB, p.Starts, p.Size))
	}
	return out
}

// nvidiaBusID turns a vSphere PCI id (0000:3b:00.0) into nvidia-smi's form (00000000:3B:00.0).
func nvidiaBusID(pciID string) string {
	parts := strings.SplitN(pciID, ":", 2)
	if len(parts) != 2 {
		return strings.ToUpper(pciID)
	}
	return fmt.Sprintf("%08s", strings.ToUpper(parts[0])) + ":" + strings.ToUpper(parts[1])
}

// gpuUUID derives a stable GPU UUID from host and PCI id.
func gpuUUID(host, pciID string) string {
	h := fmt.Sprintf("%x", sha256.Sum256([]byte(host+"/"+pciID)))
	return fmt.Sprintf("GPU-%s-%s-%s-%s-%s", h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])
}

// hostView maps a farm snapshot to the shell's view.
func hostView(info farm.HostInfo) esxsh.Host {
	h := esxsh.Host{Name: info.Name, DriverVersion: info.Access.Manager, UndeclaredNvidiaParams: info.UndeclaredParams,
		VIBs: vc.VIBLines(info.Access)}
	index := map[string]int{}
	for _, g := range info.GPUs {
		index[g.PCIID] = g.Index
	}
	for _, g := range info.GPUs {
		m := g.Model
		v := esxsh.GPU{
			Index: g.Index, BusID: nvidiaBusID(g.PCIID), UUID: gpuUUID(info.Name, g.PCIID), Name: m.DeviceName,
			Board: m.Board, Architecture: architecture(m.Board), DeviceID: uint16(m.DeviceID),
			MemoryMiB: m.FramebufferGB * 1024, NUMANode: g.Index * 2 / max(len(info.GPUs), 1),
			MIGCapable: m.MIGCapable, MIGProfiles: migProfiles(m), MIGCurrent: g.MIGCurrent, MIGPending: g.MIGPending,
			ECCCurrent: g.ECCCurrent, ECCPending: g.ECCPending,
			Heterogeneous: g.TimeSlicedMode == farm.ModeMixedSize, ActiveVGPUs: len(g.VGPUs),
		}
		for _, s := range g.VGPUs {
			if s.Start >= 0 && s.Size > 0 { // instance ids in the order vSphere created them (a driver picks its own)
				v.MIGInstances = append(v.MIGInstances, esxsh.MIGInstance{ID: len(v.MIGInstances) + 1, Profile: s.GI, Start: s.Start, Size: s.Size})
			}
		}
		v.NVLinks, v.SwitchPeers = gpuNVLinks(m, g, info.NVLinkTopology, index, linkSpeed[v.Architecture])
		h.GPUs = append(h.GPUs, v)
	}
	return h
}
