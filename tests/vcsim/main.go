// Command gpusim is a GPU-aware vSphere simulator built on govmomi's vcsim: GPUs on hosts, vGPU
// profiles, HostGraphicsManager, HostKernelModuleSystem, vGPU admission at power-on, maintenance
// mode and reboot, and a /gpusim/ control endpoint. See README.md.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"gpusim/internal/farm"
	"gpusim/internal/vc"
)

// Extension is started after the simulator listens (e.g. the ESXi SSH shell). It returns extra
// environment lines to print and a stop function.
type Extension func(sim *vc.Sim) (env [][2]string, stop func(), err error)

var extensions []Extension

// registerExtension adds an extension; call it from an init function in this package.
func registerExtension(e Extension) { extensions = append(extensions, e) }

type options struct {
	listen, envFile, farmFile string
	catalogue                 string
	listModels                bool
	spec                      vc.Spec
	clusters                  int
	templates                 string
	stateDir                  string
	ssh                       *sshFlags
	guests                    *guestFlags
}

// topologyFlags cannot be combined with -farm.
var topologyFlags = map[string]bool{
	"datacenter": true, "clusters": true, "cluster": true, "hosts": true, "gpus": true, "model": true,
	"nvlink": true, "graphics-type": true, "policy": true, "vgpu-mode": true, "mig": true, "vms": true,
	"templates": true, "nvidia-options": true, "host-domain": true,
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	def := vc.DefaultSpec()
	c := def.Clusters[0]
	o := &options{}
	fs := flag.NewFlagSet("gpusim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "listen address (port 0 = a free port)")
	fs.StringVar(&o.envFile, "env-file", "", "also write the export line to this file")
	fs.StringVar(&o.farmFile, "farm", "", "farm file (YAML or JSON); see README.md")
	fs.StringVar(&o.catalogue, "catalogue", "", "vGPU type catalogue (default: "+farm.CatalogueRelPath+" of the checkout)")
	fs.BoolVar(&o.listModels, "models", false, "print the catalogue's GPU model names, one per line, and exit")
	fs.StringVar(&o.spec.Username, "username", def.Username, "vSphere user name")
	fs.StringVar(&o.spec.Password, "password", def.Password, "vSphere password")
	fs.StringVar(&o.spec.APIVersion, "api-version", def.APIVersion, "vSphere API version")
	fs.Float64Var(&o.spec.RebootSeconds, "reboot-seconds", def.RebootSeconds, "seconds a rebooting host is not responding")
	fs.StringVar(&o.spec.Datacenter, "datacenter", def.Datacenter, "datacenter name")
	fs.StringVar(&o.spec.HostDomain, "host-domain", def.HostDomain, "host name domain (esx-01.<domain>)")
	fs.IntVar(&o.clusters, "clusters", 1, "number of clusters (GPU-Cluster, GPU-Cluster-2, ...)")
	fs.StringVar(&c.Name, "cluster", c.Name, "name of the first cluster")
	fs.IntVar(&c.Hosts, "hosts", c.Hosts, "hosts per cluster")
	fs.IntVar(&c.GPUs, "gpus", c.GPUs, "GPUs per host")
	fs.StringVar(&c.Model, "model", c.Model, "GPU model, a board of the catalogue (-models lists them)")
	fs.StringVar(&c.NVLink, "nvlink", c.NVLink, "NVLink topology: pairs, quads, nvswitch or none (default: the board's)")
	fs.StringVar(&c.GraphicsType, "graphics-type", c.GraphicsType, "host default graphics type: shared or sharedDirect")
	fs.StringVar(&c.AssignmentPolicy, "policy", c.AssignmentPolicy, "vGPU assignment policy: performance or consolidation")
	fs.StringVar(&c.VgpuMode, "vgpu-mode", c.VgpuMode, "time-sliced vGPU mode: sameSize or mixedSize")
	fs.BoolVar(&c.MIG, "mig", false, "GPUs start in MIG mode")
	fs.StringVar(&c.NvidiaOptions, "nvidia-options", "", "nvidia kernel module options at start")
	fs.IntVar(&o.spec.VMCount, "vms", 0, "number of powered-off VMs vm-0001... (round robin over hosts)")
	fs.StringVar(&o.templates, "templates", def.Templates[0].Name, "comma-separated VM template names (EFI, no vGPUs)")
	fs.StringVar(&o.stateDir, "state-dir", "", "directory for state kept across restarts (SSH host keys); default: the env file's directory")
	o.ssh = addSSHFlags(fs)
	o.guests = addGuestFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := o.guests.check(); err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return nil, fmt.Errorf("-listen %q: %v", o.listen, err)
	}
	path, err := farm.FindCatalogue(o.catalogue)
	if err != nil {
		return nil, err
	}
	cat, err := farm.LoadCatalogFile(path)
	if err != nil {
		return nil, err
	}
	o.spec.Catalog = cat
	if o.listModels {
		return o, nil
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.farmFile != "" {
		for name := range set {
			if topologyFlags[name] {
				return nil, fmt.Errorf("-%s cannot be combined with -farm", name)
			}
		}
		data, err := os.ReadFile(o.farmFile)
		if err != nil {
			return nil, err
		}
		spec, err := vc.ParseSpec(data, cat)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.farmFile, err)
		}
		for name, apply := range map[string]func(){
			"username": func() { spec.Username = o.spec.Username }, "password": func() { spec.Password = o.spec.Password },
			"api-version": func() { spec.APIVersion = o.spec.APIVersion }, "reboot-seconds": func() { spec.RebootSeconds = o.spec.RebootSeconds },
		} {
			if set[name] {
				apply()
			}
		}
		o.spec = spec
		return o, o.spec.Validate()
	}
	if o.clusters < 0 || o.clusters > 64 {
		return nil, fmt.Errorf("-clusters must be 0..64")
	}
	for i := 0; i < o.clusters; i++ {
		cc := c
		if i > 0 {
			cc.Name = fmt.Sprintf("%s-%d", c.Name, i+1)
		}
		o.spec.Clusters = append(o.spec.Clusters, cc)
	}
	for _, t := range strings.Split(o.templates, ",") {
		if t = strings.TrimSpace(t); t != "" {
			tmpl := def.Templates[0]
			tmpl.Name = t
			o.spec.Templates = append(o.spec.Templates, tmpl)
		}
	}
	return o, o.spec.Validate()
}

func exportLine(env [][2]string) string {
	parts := []string{"export"}
	for _, kv := range env {
		parts = append(parts, kv[0]+"="+shellQuote(kv[1]))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@=,+%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func run(args []string, stdout, stderr io.Writer, stop <-chan os.Signal) int {
	o, err := parseFlags(args, stderr)
	if err == flag.ErrHelp {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpusim: %v\n", err)
		return 2
	}
	if o.listModels {
		for _, name := range o.spec.Catalog.Names() {
			fmt.Fprintln(stdout, name)
		}
		return 0
	}
	sim, err := vc.New(o.spec)
	if err != nil {
		fmt.Fprintf(stderr, "gpusim: %v\n", err)
		return 2
	}
	defer sim.Close()
	enableVAPI(sim) // vapi_wiring.go
	if err := sim.Start(o.listen); err != nil {
		fmt.Fprintf(stderr, "gpusim: %v\n", err)
		return 1
	}
	env := sim.Env()
	if !o.ssh.disabled {
		outDir, stateDir := "", o.stateDir
		if o.envFile != "" {
			outDir = filepath.Dir(o.envFile)
			if stateDir == "" {
				stateDir = outDir
			}
		}
		logf := func(format string, args ...any) { fmt.Fprintf(stderr, "gpusim: ssh: "+format+"\n", args...) }
		srv, err := startESXiShell(sim.Farm, o.ssh, o.spec.Password, stateDir, outDir, logf)
		if err != nil {
			fmt.Fprintf(stderr, "gpusim: ssh: %v\n", err)
			return 1
		}
		defer func() { _ = srv.Close() }()
		env = append(env, sshEnv(srv, o.spec.Password)...)
		for pattern, h := range sshControlRoutes(srv) {
			sim.HandleControl(pattern, h.ServeHTTP)
		}
	}
	if o.guests.dir != "" {
		logf := func(format string, args ...any) { fmt.Fprintf(stderr, "gpusim: guests: "+format+"\n", args...) }
		extra, stopGuests, err := startGuests(sim, o.guests, logf)
		if err != nil {
			fmt.Fprintf(stderr, "gpusim: guests: %v\n", err)
			return 1
		}
		defer stopGuests()
		env = append(env, extra...)
	}
	for _, ext := range extensions {
		extra, stopExt, err := ext(sim)
		if err != nil {
			fmt.Fprintf(stderr, "gpusim: %v\n", err)
			return 1
		}
		env = append(env, extra...)
		if stopExt != nil {
			defer stopExt()
		}
	}
	line := exportLine(env)
	if o.envFile != "" {
		if err := os.WriteFile(o.envFile, []byte(line+"\n"), 0o600); err != nil {
			fmt.Fprintf(stderr, "gpusim: env file: %v\n", err)
			return 1
		}
	}
	fmt.Fprintln(stdout, line)
	if f, ok := stdout.(*os.File); ok {
		_ = f.Sync()
	}
	<-stop
	return 0
}

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, stop))
}
