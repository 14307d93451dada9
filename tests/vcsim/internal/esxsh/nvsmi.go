package esxsh

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gpusim/internal/farm"
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

// argReader walks a command line's arguments: "--name=value" carries its value inline, "-x value" in the
// next argument.
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

// smiCall is one parsed nvidia-smi command line, as its action gets it.
type smiCall struct {
	cmd   *smiCommand
	host  Host
	gpus  []GPU             // the GPUs -i selected; all without -i
	value string            // the action's value (-mig 1, --query-gpu=index,name)
	opts  map[string]string // the modifiers given (-i, --format), by their first name
}

// has reports whether a modifier was given.
func (c smiCall) has(name string) bool {
	_, ok := c.opts[name]
	return ok
}

// smiAction does what a command line asked for.
type smiAction func(s *Shell, c smiCall) Result

// smiFlag is one option of an nvidia-smi command: an action (what the command does; at most one per command
// line) or, without run, a modifier of the action.
type smiFlag struct {
	names    []string // the spellings, short first
	usage    string   // what `nvidia-smi -h` shows; "" for none
	hasValue bool     // takes a value: -i 0, --id=0
	run      smiAction
	anyGPU   bool   // the action runs without GPUs (-h): -i is not resolved
	with     string // a modifier valid only with this action (its first name)
}

// smiCommand is nvidia-smi or one of its subcommands: its options, and what it does without an action (nil:
// an invalid combination).
type smiCommand struct {
	flags    []smiFlag
	noAction smiAction
}

// smiMain is nvidia-smi's main command: one entry per option.
var smiMain = smiCommand{
	flags: []smiFlag{
		{names: []string{"-L", "--list-gpus"}, usage: "-L", run: smiList},
		{names: []string{"-q", "--query"}, usage: "-q", run: smiQuery},
		{names: []string{"-i", "--id"}, usage: "-i <index|bus id|uuid>", hasValue: true},
		{names: []string{"--query-gpu"}, usage: "--query-gpu=<fields>", hasValue: true, run: smiQueryGPU},
		{names: []string{"--format"}, usage: "--format=csv[,noheader][,nounits]", hasValue: true, with: "--query-gpu"},
		{names: []string{"-mig", "--multi-instance-gpu"}, usage: "-mig 0|1", hasValue: true, run: smiSetMIG},
		{names: []string{"-e", "--ecc-config"}, usage: "-e 0|1", hasValue: true, run: smiSetECC},
		{names: []string{"-h", "--help"}, run: smiHelp, anyGPU: true},
	},
	// The real tool prints its summary table; the list is what scripts need from it.
	noAction: smiList,
}

// smiSubcommands are nvidia-smi's subcommands, by name.
var smiSubcommands = map[string]*smiCommand{
	"mig": {flags: []smiFlag{
		{names: []string{"-lgip", "--list-gpu-instance-profiles"}, usage: "-lgip", run: migEnabled(stdout(RenderLGIP))},
		{names: []string{"-lgipp", "--list-gpu-instance-possible-placements"}, usage: "-lgipp", run: migEnabled(stdout(RenderLGIPP))},
		{names: []string{"-lgi", "--list-gpu-instances"}, usage: "-lgi", run: migEnabled(renderLGIResult)},
		{names: []string{"-i", "--id"}, hasValue: true},
	}},
	"nvlink": {flags: []smiFlag{
		{names: []string{"-s", "--status"}, usage: "-s", run: onGPUs(stdout(RenderNVLinkStatus))},
		{names: []string{"-i", "--id"}, hasValue: true},
	}},
	"topo": {flags: []smiFlag{
		{names: []string{"-m", "--matrix"}, usage: "-m", run: onGPUs(stdout(RenderTopo))},
	}},
	"vgpu": {flags: []smiFlag{
		{names: []string{"-q", "--query"}, usage: "-q", run: smiVGPUQuery}, // software.go
		{names: []string{"-i", "--id"}, hasValue: true},
	}},
}

// smiSubcommandOrder is the order `nvidia-smi -h` lists the subcommands in.
var smiSubcommandOrder = []string{"mig", "nvlink", "topo", "vgpu"}

func (s *Shell) nvidiaSMI(h Host, args []string) Result {
	if len(args) > 0 {
		if sub, ok := smiSubcommands[args[0]]; ok {
			return s.smiRun(sub, h, args[1:])
		}
	}
	return s.smiRun(&smiMain, h, args)
}

// smiRun parses a command line against a command's options and runs its action: unknown options and missing
// values are usage errors, two actions (or a modifier without its action) an invalid combination, as the real
// tool answers them.
func (s *Shell) smiRun(cmd *smiCommand, h Host, args []string) Result {
	c := smiCall{cmd: cmd, host: h, opts: map[string]string{}}
	var action *smiFlag
	conflict := false // a second action: refused once every option is known, as the real tool does
	r := &argReader{args: args}
	for r.more() {
		name, inline, has := r.next()
		f := cmd.flag(name)
		if f == nil {
			return usageError("ERROR: Option %s is not recognized.", name)
		}
		value := ""
		if f.hasValue {
			var bad *Result
			if value, bad = r.value(name, inline, has); bad != nil {
				return *bad
			}
		}
		if f.run == nil {
			c.opts[f.names[0]] = value
			continue
		}
		conflict = conflict || action != nil && action != f
		action, c.value = f, value
	}
	run := cmd.noAction
	if action != nil {
		run = action.run
	}
	if run == nil || conflict || !cmd.modifiersFit(action, c) {
		return invalidCombination()
	}
	if action == nil || !action.anyGPU {
		var res *Result
		if c.gpus, res = selectGPUs(h, c.opts["-i"], c.has("-i")); res != nil {
			return *res
		}
	}
	return run(s, c)
}

// flag is the option spelled name, or nil.
func (cmd *smiCommand) flag(name string) *smiFlag {
	for i := range cmd.flags {
		if slices.Contains(cmd.flags[i].names, name) {
			return &cmd.flags[i]
		}
	}
	return nil
}

// modifiersFit reports whether every modifier given that belongs to an action comes with it.
func (cmd *smiCommand) modifiersFit(action *smiFlag, c smiCall) bool {
	for _, f := range cmd.flags {
		if f.with != "" && c.has(f.names[0]) && (action == nil || action.names[0] != f.with) {
			return false
		}
	}
	return true
}

// stdout is the Result of a renderer over GPUs.
func stdout(render func([]GPU) string) func([]GPU) Result {
	return func(gpus []GPU) Result { return Result{Stdout: render(gpus)} }
}

// onGPUs runs a listing over the selected GPUs.
func onGPUs(list func([]GPU) Result) smiAction {
	return func(_ *Shell, c smiCall) Result { return list(c.gpus) }
}

func smiList(_ *Shell, c smiCall) Result { return Result{Stdout: RenderList(c.gpus)} }

func smiQuery(s *Shell, c smiCall) Result {
	return Result{Stdout: RenderQuery(c.host, c.gpus, s.now())}
}

// smiHelp is `nvidia-smi -h`: the options and subcommands gpusim answers, from their tables.
func smiHelp(_ *Shell, c smiCall) Result {
	var usage []string
	for _, f := range c.cmd.flags {
		if f.usage != "" {
			usage = append(usage, f.usage)
		}
	}
	for _, name := range smiSubcommandOrder {
		for _, f := range smiSubcommands[name].flags {
			if f.usage != "" {
				usage = append(usage, name+" "+f.usage)
			}
		}
	}
	return Result{Stdout: "NVIDIA System Management Interface -- v550.90.05\n\nSupported here (gpusim): " +
		strings.Join(usage, ", ") + "\n"}
}

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

// smiQueryGPU is `nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]`.
func smiQueryGPU(_ *Shell, c smiCall) Result {
	if !c.has("--format") {
		return usageError(`"--format=" switch is missing.`)
	}
	var opt CSVOptions
	csv := false
	for _, f := range strings.Split(c.opts["--format"], ",") {
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
	for _, f := range strings.Split(c.value, ",") {
		f = strings.TrimSpace(f)
		name := CanonicalField(f)
		if name == "" {
			return Result{Stderr: fmt.Sprintf("Field \"%s\" is not a valid field to query.\n\n", f), Exit: exitInvalidArg}
		}
		fields = append(fields, name)
	}
	return Result{Stdout: RenderQueryCSV(c.host, c.gpus, fields, opt)}
}

// onOffValue reads the value of a mode switch (-mig 1, -e DISABLED).
func onOffValue(v string) (on, ok bool) {
	switch v {
	case "0", "DISABLED", "disabled":
		return false, true
	case "1", "ENABLED", "enabled":
		return true, true
	}
	return false, false
}

// smiSetMIG is `nvidia-smi [-i ID] -mig 0|1`: MIG mode on or off for the selected GPUs, now or pending (the
// farm's rule); a GPU without MIG is skipped with a warning, or fails the command when it is the one -i names.
func smiSetMIG(s *Shell, c smiCall) Result {
	enable, ok := onOffValue(c.value)
	if !ok {
		return invalidCombination()
	}
	var out strings.Builder
	verb := "disable"
	if enable {
		verb = "enable"
	}
	for _, g := range c.gpus {
		if !g.MIGCapable {
			fmt.Fprintf(&out, "Unable to %s MIG Mode for GPU %s: Not Supported\n", verb, g.BusID)
			if c.has("-i") && len(c.gpus) == 1 {
				return Result{Stdout: out.String(), Exit: exitNotSupported}
			}
			out.WriteString("Treating as warning and moving on.\n")
			continue
		}
		applied, err := s.Backend.Apply(c.host.Name, GPUChange{PCIID: g.PCIID, Setting: farm.GPUSetting{Property: farm.GPUPropMIG, On: enable}})
		if err != nil {
			return Result{Stdout: out.String(),
				Stderr: fmt.Sprintf("Unable to %s MIG Mode for GPU %s: %v\n", verb, g.BusID, err), Exit: exitUnknownError}
		}
		out.WriteString(RenderMIGSet(g, enable, applied.Outcome))
	}
	out.WriteString("All done.\n")
	return Result{Stdout: out.String()}
}

// smiSetECC is `nvidia-smi [-i ID] -e 0|1`: ECC memory on or off from the next reboot, for the selected GPUs.
func smiSetECC(s *Shell, c smiCall) Result {
	enable, ok := onOffValue(c.value)
	if !ok {
		return invalidCombination()
	}
	var out strings.Builder
	for _, g := range c.gpus {
		if _, err := s.Backend.Apply(c.host.Name, GPUChange{PCIID: g.PCIID, Setting: farm.GPUSetting{Property: farm.GPUPropECC, On: enable}}); err != nil {
			return Result{Stdout: out.String(), Stderr: fmt.Sprintf("Unable to set the ECC mode for GPU %s: %v\n", g.BusID, err),
				Exit: exitUnknownError}
		}
		out.WriteString(RenderECCSet(g, enable))
	}
	out.WriteString("All done.\nReboot required.\n")
	return Result{Stdout: out.String()}
}

// migEnabled runs a `nvidia-smi mig` listing over the selected GPUs that are in MIG mode ("No MIG-enabled
// devices found." when none is).
func migEnabled(list func([]GPU) Result) smiAction {
	return func(_ *Shell, c smiCall) Result {
		var migOn []GPU
		for _, g := range c.gpus {
			if g.MIGCapable && g.MIGCurrent {
				migOn = append(migOn, g)
			}
		}
		if len(migOn) == 0 {
			return Result{Stdout: "No MIG-enabled devices found.\n", Exit: exitNotFound}
		}
		return list(migOn)
	}
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
