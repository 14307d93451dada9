package esxsh

import (
	"fmt"
	"strconv"
	"strings"
)

// nvidia-smi exit codes (nvidia-smi(1) RETURN VALUE).
const (
	exitOK           = 0
	exitInvalidArg   = 2
	exitNotSupported = 3
	exitNotFound     = 6
	exitUnknownError = 255
)

func usageError(format string, a ...any) Result {
	return Result{Stderr: fmt.Sprintf(format, a...) + " Please run 'nvidia-smi -h' for help.\n", Exit: exitInvalidArg}
}

func invalidCombination() Result {
	return Result{Stderr: "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n", Exit: exitInvalidArg}
}

func noDevices() Result {
	return Result{Stdout: "No devices were found\n", Exit: exitNotFound}
}

// flagValue splits "--name=value" and finds the value of "-x value".
type argReader struct {
	args []string
	i    int
}

func (r *argReader) more() bool { return r.i < len(r.args) }

// next returns the option name, its inline value (after '='), and whether it had one.
func (r *argReader) next() (name, inline string, hasInline bool) {
	a := r.args[r.i]
	r.i++
	if strings.HasPrefix(a, "--") {
		if k, v, ok := strings.Cut(a, "="); ok {
			return k, v, true
		}
	}
	return a, "", false
}

// value returns the value of an option: inline, or the next argument.
func (r *argReader) value(name, inline string, hasInline bool) (string, *Result) {
	if hasInline {
		return inline, nil
	}
	if !r.more() {
		res := usageError("ERROR: Option %s is missing its value.", name)
		return "", &res
	}
	v := r.args[r.i]
	r.i++
	return v, nil
}

type smiMain struct {
	list, query, help bool
	ids               string
	idsSet            bool
	queryGPU          string
	format            string
	formatSet         bool
	mig               string
	migSet            bool
	ecc               string
	eccSet            bool
}

func (s *Shell) nvidiaSMI(h Host, args []string) Result {
	if len(args) > 0 {
		switch args[0] {
		case "mig":
			return s.smiMIG(h, args[1:])
		case "nvlink":
			return smiNVLink(h, args[1:])
		case "topo":
			return smiTopo(h, args[1:])
		case "vgpu":
			return smiVGPU(h, args[1:]) // software.go
		}
	}
	var m smiMain
	r := &argReader{args: args}
	for r.more() {
		name, inline, has := r.next()
		var bad *Result
		switch name {
		case "-L", "--list-gpus":
			m.list = true
		case "-q", "--query":
			m.query = true
		case "-h", "--help":
			m.help = true
		case "-i", "--id":
			m.ids, bad = r.value(name, inline, has)
			m.idsSet = true
		case "--query-gpu":
			m.queryGPU, bad = r.value(name, inline, has)
		case "--format":
			m.format, bad = r.value(name, inline, has)
			m.formatSet = true
		case "-mig", "--multi-instance-gpu":
			m.mig, bad = r.value(name, inline, has)
			m.migSet = true
		case "-e", "--ecc-config":
			m.ecc, bad = r.value(name, inline, has)
			m.eccSet = true
		default:
			return usageError("ERROR: Option %s is not recognized.", name)
		}
		if bad != nil {
			return *bad
		}
	}
	return s.smiRun(h, m)
}

func (s *Shell) smiRun(h Host, m smiMain) Result {
	actions := 0
	for _, on := range []bool{m.list, m.query, m.queryGPU != "", m.migSet, m.eccSet, m.help} {
		if on {
			actions++
		}
	}
	if actions > 1 || (m.formatSet && m.queryGPU == "") {
		return invalidCombination()
	}
	if m.help {
		return Result{Stdout: smiHelp}
	}
	gpus, res := selectGPUs(h, m.ids, m.idsSet)
	if res != nil {
		return *res
	}
	switch {
	case m.list:
		return Result{Stdout: RenderList(gpus)}
	case m.query:
		return Result{Stdout: RenderQuery(h, gpus, s.now())}
	case m.queryGPU != "":
		return smiQueryGPU(h, gpus, m)
	case m.migSet:
		return s.smiSetMIG(h, gpus, m.mig, m.idsSet)
	case m.eccSet:
		return s.smiSetECC(h, gpus, m.ecc)
	}
	// No action: the real tool prints its summary table; the list is what scripts need from it.
	return Result{Stdout: RenderList(gpus)}
}

const smiHelp = `NVIDIA System Management Interface -- v550.90.05

Supported here (gpusim): -L, -q, -i <index|bus id|uuid>, --query-gpu=<fields> --format=csv[,noheader][,nounits],
-mig 0|1, -e 0|1, mig -lgip, mig -lgipp, mig -lgi, nvlink -s, topo -m
`

// selectGPUs resolves -i (comma-separated indices, PCI bus ids or UUIDs); all GPUs without -i.
func selectGPUs(h Host, ids string, set bool) ([]GPU, *Result) {
	if len(h.GPUs) == 0 {
		r := noDevices()
		return nil, &r
	}
	if !set {
		return h.GPUs, nil
	}
	var out []GPU
	for _, id := range strings.Split(ids, ",") {
		g, ok := findGPU(h, strings.TrimSpace(id))
		if !ok {
			r := noDevices()
			return nil, &r
		}
		out = append(out, g)
	}
	return out, nil
}

func findGPU(h Host, id string) (GPU, bool) {
	if n, err := strconv.Atoi(id); err == nil {
		for _, g := range h.GPUs {
			if g.Index == n {
				return g, true
			}
		}
		return GPU{}, false
	}
	for _, g := range h.GPUs {
		if strings.EqualFold(g.UUID, id) || sameBusID(g.BusID, id) {
			return g, true
		}
	}
	return GPU{}, false
}

// sameBusID compares PCI addresses whatever the domain width (00000000:3B:00.0, 0000:3b:00.0, 3B:00.0).
func sameBusID(a, b string) bool {
	norm := func(s string) string {
		parts := strings.Split(strings.ToLower(s), ":")
		if len(parts) == 3 {
			d := strings.TrimLeft(parts[0], "0")
			return d + ":" + parts[1] + ":" + parts[2]
		}
		if len(parts) == 2 {
			return ":" + parts[0] + ":" + parts[1]
		}
		return s
	}
	return norm(a) != "" && norm(a) == norm(b)
}

func smiQueryGPU(h Host, gpus []GPU, m smiMain) Result {
	if !m.formatSet {
		return usageError(`"--format=" switch is missing.`)
	}
	var opt CSVOptions
	csv := false
	for _, f := range strings.Split(m.format, ",") {
		switch strings.TrimSpace(f) {
		case "csv":
			csv = true
		case "noheader":
			opt.NoHeader = true
		case "nounits":
			opt.NoUnits = true
		default:
			return invalidCombination()
		}
	}
	if !csv {
		return invalidCombination()
	}
	var fields []string
	for _, f := range strings.Split(m.queryGPU, ",") {
		f = strings.TrimSpace(f)
		c := CanonicalField(f)
		if c == "" {
			return Result{Stderr: fmt.Sprintf("Field \"%s\" is not a valid field to query.\n\n", f), Exit: exitInvalidArg}
		}
		fields = append(fields, c)
	}
	return Result{Stdout: RenderQueryCSV(h, gpus, fields, opt)}
}

func (s *Shell) smiSetMIG(h Host, gpus []GPU, value string, single bool) Result {
	var enable bool
	switch value {
	case "0", "DISABLED", "disabled":
	case "1", "ENABLED", "enabled":
		enable = true
	default:
		return invalidCombination()
	}
	var out strings.Builder
	verb := "disable"
	if enable {
		verb = "enable"
	}
	for _, g := range gpus {
		if !g.MIGCapable {
			fmt.Fprintf(&out, "Unable to %s MIG Mode for GPU %s: Not Supported\n", verb, g.BusID)
			if single && len(gpus) == 1 {
				return Result{Stdout: out.String(), Exit: exitNotSupported}
			}
			out.WriteString("Treating as warning and moving on.\n")
			continue
		}
		change, err := s.Backend.SetMIGMode(h.Name, g.Index, enable)
		if err != nil {
			return Result{Stdout: out.String(),
				Stderr: fmt.Sprintf("Unable to %s MIG Mode for GPU %s: %v\n", verb, g.BusID, err), Exit: exitUnknownError}
		}
		out.WriteString(RenderMIGSet(g, enable, change))
	}
	out.WriteString("All done.\n")
	return Result{Stdout: out.String()}
}

// smiSetECC is `nvidia-smi [-i ID] -e 0|1`: ECC memory on or off from the next reboot, for the selected GPUs.
func (s *Shell) smiSetECC(h Host, gpus []GPU, value string) Result {
	var enable bool
	switch value {
	case "0", "DISABLED", "disabled":
	case "1", "ENABLED", "enabled":
		enable = true
	default:
		return invalidCombination()
	}
	var out strings.Builder
	for _, g := range gpus {
		if err := s.Backend.SetECCMode(h.Name, g.Index, enable); err != nil {
			return Result{Stdout: out.String(), Stderr: fmt.Sprintf("Unable to set the ECC mode for GPU %s: %v\n", g.BusID, err),
				Exit: exitUnknownError}
		}
		out.WriteString(RenderECCSet(g, enable))
	}
	out.WriteString("All done.\nReboot required.\n")
	return Result{Stdout: out.String()}
}

func (s *Shell) smiMIG(h Host, args []string) Result {
	var (
		lgip, lgipp, lgi bool
		ids              string
		idsSet           bool
	)
	r := &argReader{args: args}
	for r.more() {
		name, inline, has := r.next()
		var bad *Result
		switch name {
		case "-lgip", "--list-gpu-instance-profiles":
			lgip = true
		case "-lgipp", "--list-gpu-instance-possible-placements":
			lgipp = true
		case "-lgi", "--list-gpu-instances":
			lgi = true
		case "-i", "--id":
			ids, bad = r.value(name, inline, has)
			idsSet = true
		default:
			return usageError("ERROR: Option %s is not recognized.", name)
		}
		if bad != nil {
			return *bad
		}
	}
	if n := btoi(lgip) + btoi(lgipp) + btoi(lgi); n != 1 {
		return invalidCombination()
	}
	gpus, res := selectGPUs(h, ids, idsSet)
	if res != nil {
		return *res
	}
	var migOn []GPU
	for _, g := range gpus {
		if g.MIGCapable && g.MIGCurrent {
			migOn = append(migOn, g)
		}
	}
	if len(migOn) == 0 {
		return Result{Stdout: "No MIG-enabled devices found.\n", Exit: exitNotFound}
	}
	switch {
	case lgip:
		return Result{Stdout: RenderLGIP(migOn)}
	case lgi:
		return renderLGIResult(migOn)
	}
	return Result{Stdout: RenderLGIPP(migOn)}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// renderLGIResult is `nvidia-smi mig -lgi`: the table, or NVML's "Not Found" when no GPU instance exists.
func renderLGIResult(gpus []GPU) Result {
	for _, g := range gpus {
		if len(g.MIGInstances) > 0 {
			return Result{Stdout: RenderLGI(gpus)}
		}
	}
	return Result{Stdout: "No GPU instances found: Not Found\n", Exit: exitNotFound}
}

func smiNVLink(h Host, args []string) Result {
	var (
		status bool
		ids    string
		idsSet bool
	)
	r := &argReader{args: args}
	for r.more() {
		name, inline, has := r.next()
		var bad *Result
		switch name {
		case "-s", "--status":
			status = true
		case "-i", "--id":
			ids, bad = r.value(name, inline, has)
			idsSet = true
		default:
			return usageError("ERROR: Option %s is not recognized.", name)
		}
		if bad != nil {
			return *bad
		}
	}
	if !status {
		return invalidCombination()
	}
	gpus, res := selectGPUs(h, ids, idsSet)
	if res != nil {
		return *res
	}
	return Result{Stdout: RenderNVLinkStatus(gpus)}
}

func smiTopo(h Host, args []string) Result {
	matrix := false
	for _, a := range args {
		switch a {
		case "-m", "--matrix":
			matrix = true
		default:
			return usageError("ERROR: Option %s is not recognized.", a)
		}
	}
	if !matrix {
		return invalidCombination()
	}
	if len(h.GPUs) == 0 {
		return noDevices()
	}
	return Result{Stdout: RenderTopo(h.GPUs)}
}
