package esxsh

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// declaredParams are the parameters a module declares (what `parameters list` shows, sorted by name).
// Values come from the module's configured option string.
var declaredParams = map[string][]ModuleParam{
	"nvidia": {
		{Name: "NVreg_EnableMSI", Type: "int", Description: "Enable message signaled interrupts (1 = enabled)"},
		{Name: "NVreg_NvLinkDisable", Type: "int", Description: "Disable NVLink training (1 = disabled)"},
		{Name: "NVreg_RegistryDwords", Type: "string", Description: "Semicolon-separated RM registry keys: key=value;..."},
		{Name: "NVreg_RegistryDwordsPerDevice", Type: "string", Description: "Per-device RM registry keys: pci=DDDD:BB:DD.F;key=value;..."},
		{Name: "NVreg_ResmanDebugLevel", Type: "int", Description: "Resource manager debug level"},
	},
}

// ParseModuleOptions splits a module option string ("a=1 b=\"x y\"") into name -> value, in order.
func ParseModuleOptions(options string) (names []string, values map[string]string) {
	values = map[string]string{}
	words, err := SplitCommandLine(options)
	if err != nil {
		words = strings.Fields(options)
	}
	for _, w := range words {
		k, v, _ := strings.Cut(w, "=")
		if _, seen := values[k]; !seen {
			names = append(names, k)
		}
		values[k] = v
	}
	return names, values
}

func esxcliError(msg string) Result {
	return Result{Stderr: "Error: " + msg + "\n", Exit: 1}
}

func (s *Shell) esxcli(h Host, args []string) Result {
	var ns []string
	i := 0
	for ; i < len(args) && !strings.HasPrefix(args[i], "-"); i++ {
		ns = append(ns, args[i])
	}
	path := strings.Join(ns, " ")
	switch path {
	case "system module parameters list":
		return s.esxcliParamsList(h, args[i:])
	case "system module parameters set":
		return s.esxcliParamsSet(h, args[i:])
	case "software vib list":
		if len(args[i:]) > 0 {
			return esxcliError("Invalid option " + args[i])
		}
		vibs, err := s.Backend.VIBs(h.Name)
		if err != nil {
			return esxcliError(err.Error())
		}
		return esxcliVIBList(vibs)
	}
	if res, ok := s.software(h, path, args[i:]); ok { // software.go
		return res
	}
	return esxcliError("Unknown command or namespace " + path)
}

type esxcliOpts struct {
	module, params string
	paramsSet      bool
	append         bool
}

func parseEsxcliOpts(args []string, allowSet bool) (esxcliOpts, *Result) {
	var o esxcliOpts
	r := &argReader{args: args}
	for r.more() {
		name, inline, has := r.next()
		if strings.HasPrefix(name, "-") && !strings.HasPrefix(name, "--") && len(name) > 2 {
			// esxcli accepts -mnvidia as -m nvidia
			name, inline, has = name[:2], name[2:], true
		}
		var err *Result
		switch {
		case name == "-m" || name == "--module":
			o.module, err = esxcliValue(r, name, inline, has)
		case allowSet && (name == "-p" || name == "--parameter-string"):
			o.params, err = esxcliValue(r, name, inline, has)
			o.paramsSet = true
		case allowSet && (name == "-a" || name == "--append"):
			o.append = true
		default:
			e := esxcliError("Invalid option " + name)
			return o, &e
		}
		if err != nil {
			return o, err
		}
	}
	if o.module == "" {
		e := esxcliError("Missing required parameter -m|--module")
		return o, &e
	}
	return o, nil
}

func esxcliValue(r *argReader, name, inline string, has bool) (string, *Result) {
	if has {
		return inline, nil
	}
	if !r.more() {
		e := esxcliError("Missing value for option " + name)
		return "", &e
	}
	v := r.args[r.i]
	r.i++
	return v, nil
}

func (s *Shell) esxcliParamsList(h Host, args []string) Result {
	o, res := parseEsxcliOpts(args, false)
	if res != nil {
		return *res
	}
	options, ok := h.Modules[o.module]
	if !ok {
		return esxcliError("Unable to find module " + o.module)
	}
	// esxcli shows the configured string (what the next boot uses), like the real host.
	_, values := ParseModuleOptions(options.Configured)
	var params []ModuleParam
	for _, p := range declaredParams[o.module] {
		if o.module != "nvidia" || !slices.Contains(h.UndeclaredParams, p.Name) {
			params = append(params, p)
		}
	}
	sort.Slice(params, func(i, j int) bool { return params[i].Name < params[j].Name })
	for i := range params {
		params[i].Value = values[params[i].Name]
	}
	return Result{Stdout: RenderModuleParams(params)}
}

func (s *Shell) esxcliParamsSet(h Host, args []string) Result {
	o, res := parseEsxcliOpts(args, true)
	if res != nil {
		return *res
	}
	if !o.paramsSet {
		return esxcliError("Missing required parameter -p|--parameter-string")
	}
	current, ok := h.Modules[o.module]
	if !ok {
		return esxcliError("Unable to find module " + o.module)
	}
	next := o.params
	if configured := strings.TrimSpace(current.Configured); o.append && configured != "" {
		next = configured + " " + o.params
	}
	if _, err := s.Backend.Apply(h.Name, ModuleChange{Module: o.module, Options: next}); err != nil {
		return esxcliError(fmt.Sprintf("Unable to set module options: %v", err))
	}
	return Result{}
}

// vibColumns are the columns of `esxcli software vib list` on ESXi 8 (ESXi 7 has no Platforms).
var vibColumns = []string{"Name", "Version", "Vendor", "Acceptance Level", "Install Date", "Platforms"}

// esxcliVIBList prints the host's installed VIBs the way ESXi 8 does: a header, a dashed rule, one row per
// VIB, columns padded to the widest value.
func esxcliVIBList(vibs [][]string) Result {
	rows := append([][]string{vibColumns}, vibs...)
	widths := make([]int, len(vibColumns))
	for _, r := range rows {
		for i, cell := range r {
			if i < len(widths) && len(cell) > widths[i] {
				widths[i] = len(cell)
			}
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		var parts []string
		for i, w := range widths {
			cell := ""
			if i < len(cells) {
				cell = cells[i]
			}
			parts = append(parts, fmt.Sprintf("%-*s", w, cell))
		}
		b.WriteString(strings.TrimRight(strings.Join(parts, "  "), " ") + "\n")
	}
	line(vibColumns)
	rule := make([]string, len(widths))
	for i, w := range widths {
		rule[i] = strings.Repeat("-", w)
	}
	line(rule)
	for _, r := range vibs {
		line(r)
	}
	return Result{Stdout: b.String()}
}
