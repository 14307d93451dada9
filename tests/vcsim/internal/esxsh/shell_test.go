package esxsh

import (
	"strings"
	"testing"

	"gpusim/internal/farm"
)

func TestSplitCommandLine(t *testing.T) {
	cases := []struct {
		in   string
		want []string
		err  bool
	}{
		{`nvidia-smi -L`, []string{"nvidia-smi", "-L"}, false},
		{`esxcli system module parameters set -m nvidia -p "NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x01"`,
			[]string{"esxcli", "system", "module", "parameters", "set", "-m", "nvidia", "-p", "NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x01"}, false},
		{`echo 'a "b"' c\ d`, []string{"echo", `a "b"`, "c d"}, false},
		{`echo "unterminated`, nil, true},
		{"   ", nil, false},
	}
	for _, c := range cases {
		got, err := SplitCommandLine(c.in)
		if (err != nil) != c.err || strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("SplitCommandLine(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// Every command and its failure paths, straight through the Shell (the SSH tests repeat the main ones
// over a real connection).
func TestShellCommands(t *testing.T) {
	const host = "esx01.example.com"
	cases := []struct {
		name     string
		cmd      string
		exit     int
		stdout   []string // substrings
		stderr   []string
		noStdout []string
	}{
		{"list", "nvidia-smi -L", 0, []string{"GPU 0: NVIDIA A100-PCIE-40GB (UUID: GPU-8c7a", "GPU 2: NVIDIA L40S", "  MIG 3g.20gb     Device  0:"}, nil, nil},
		{"list by index", "nvidia-smi -L -i 2", 0, []string{"GPU 2: NVIDIA L40S"}, nil, []string{"GPU 0:"}},
		{"list by bus id", "nvidia-smi -L -i 00000000:86:00.0", 0, []string{"GPU 1:"}, nil, []string{"GPU 0:", "GPU 2:"}},
		{"list by short bus id", "nvidia-smi -L --id=0000:3b:00.0", 0, []string{"GPU 0:"}, nil, []string{"GPU 1:"}},
		{"list by uuid", "nvidia-smi -L -i GPU-77aa66bb-55cc-44dd-33ee-22ff11009988", 0, []string{"GPU 2:"}, nil, []string{"GPU 0:"}},
		{"list two", "nvidia-smi -L -i 0,2", 0, []string{"GPU 0:", "GPU 2:"}, nil, []string{"GPU 1:"}},
		{"no such gpu", "nvidia-smi -L -i 7", 6, []string{"No devices were found"}, nil, nil},
		{"query", "nvidia-smi -q", 0, []string{"Attached GPUs                             : 3", "GPU 00000000:AF:00.0", "        Current                           : N/A"}, nil, nil},
		{"query one", "nvidia-smi -q -i 1", 0, []string{"Attached GPUs                             : 3", "GPU 00000000:86:00.0", "        Current                           : Enabled"}, nil, []string{"GPU 00000000:3B:00.0"}},
		{"query-gpu csv", "nvidia-smi --query-gpu=index,pci.bus_id,name,memory.total,mig.mode.current,mig.mode.pending --format=csv", 0,
			[]string{"index, pci.bus_id, name, memory.total [MiB], mig.mode.current, mig.mode.pending\n", "1, 00000000:86:00.0, NVIDIA A100-PCIE-40GB, 40960 MiB, Enabled, Enabled\n", "[N/A], [N/A]"}, nil, nil},
		{"query-gpu noheader nounits", "nvidia-smi --query-gpu=index,memory.total --format=csv,noheader,nounits -i 0", 0, []string{"0, 40960\n"}, nil, []string{"index", "MiB"}},
		{"query-gpu split args", "nvidia-smi --query-gpu index,mig.mode.pending --format csv,noheader", 0, []string{"2, [N/A]\n"}, nil, nil},
		{"query-gpu bad field", "nvidia-smi --query-gpu=index,bogus --format=csv", 2, nil, []string{`Field "bogus" is not a valid field to query.`}, nil},
		{"query-gpu no format", "nvidia-smi --query-gpu=index", 2, nil, []string{`"--format=" switch is missing.`}, nil},
		{"format alone", "nvidia-smi --format=csv", 2, nil, []string{"Invalid combination of input arguments."}, nil},
		{"bad format", "nvidia-smi --query-gpu=index --format=xml", 2, nil, []string{"Invalid combination"}, nil},
		{"unknown option", "nvidia-smi --frobnicate", 2, nil, []string{"ERROR: Option --frobnicate is not recognized. Please run 'nvidia-smi -h' for help."}, nil},
		{"missing value", "nvidia-smi -L -i", 2, nil, []string{"ERROR: Option -i is missing its value."}, nil},
		{"two actions", "nvidia-smi -L -q", 2, nil, []string{"Invalid combination"}, nil},
		{"unknown option after two actions", "nvidia-smi -L -q --bogus", 2, nil, []string{"ERROR: Option --bogus is not recognized."}, nil},
		{"format without query-gpu", "nvidia-smi -e 1 --format=csv", 2, nil, []string{"Invalid combination"}, nil},
		{"ecc missing value", "nvidia-smi -i 0 -e", 2, nil, []string{"ERROR: Option -e is missing its value."}, nil},
		{"topo takes no -i", "nvidia-smi topo -m -i 0", 2, nil, []string{"ERROR: Option -i is not recognized."}, nil},
		{"mig bad value", "nvidia-smi -i 0 -mig 2", 2, nil, []string{"Invalid combination"}, nil},
		{"mig not capable", "nvidia-smi -i 2 -mig 1", 3, []string{"Unable to enable MIG Mode for GPU 00000000:AF:00.0: Not Supported"}, nil, nil},
		{"lgip", "nvidia-smi mig -lgip", 0, []string{"|   1  MIG 3g.20gb        9     1/2        19.50", "|   1  MIG 1g.5gb        19     3/7"}, nil, []string{"|   0  MIG"}},
		{"lgip -i non-mig", "nvidia-smi mig -lgip -i 0", 6, []string{"No MIG-enabled devices found."}, nil, nil},
		{"lgipp", "nvidia-smi mig -lgipp -i 1", 0, []string{"GPU  1 Profile ID  9 Placements: {0,4}:4", "GPU  1 Profile ID  0 Placement : {0}:8"}, nil, nil},
		{"lgi", "nvidia-smi mig -lgi", 0, []string{"| GPU instances:", "|   1  MIG 3g.20gb       9        1          0:4     |"}, nil, []string{"|   0  MIG"}},
		{"lgi none", "nvidia-smi mig --list-gpu-instances -i 0", 6, []string{"No MIG-enabled devices found."}, nil, nil},
		{"mig bad option", "nvidia-smi mig -lgx", 2, nil, []string{"ERROR: Option -lgx is not recognized."}, nil},
		{"mig two lists", "nvidia-smi mig -lgi -lgip", 2, nil, []string{"Invalid combination"}, nil},
		{"mig nothing", "nvidia-smi mig", 2, nil, []string{"Invalid combination"}, nil},
		{"nvlink", "nvidia-smi nvlink -s", 0, []string{"GPU 0: NVIDIA A100-PCIE-40GB", "\t Link 3: 25 GB/s", "GPU 2: NVIDIA L40S"}, nil, []string{"Link 4"}},
		{"nvlink one", "nvidia-smi nvlink --status -i 2", 0, []string{"GPU 2: NVIDIA L40S"}, nil, []string{"Link"}},
		{"nvlink no -s", "nvidia-smi nvlink", 2, nil, []string{"Invalid combination"}, nil},
		{"topo", "nvidia-smi topo -m", 0, []string{"GPU0\t X \tNV4\tSYS\t", "NV#  = Connection traversing a bonded set of # NVLinks"}, nil, nil},
		{"topo bad", "nvidia-smi topo -x", 2, nil, []string{"ERROR: Option -x is not recognized."}, nil},
		{"module list", "esxcli system module parameters list -m nvidia", 0, []string{"Name                           Type    Value  Description\n", "NVreg_NvLinkDisable            int"}, nil, nil},
		{"module list long flag", "esxcli system module parameters list --module=nvidia", 0, []string{"NVreg_RegistryDwords"}, nil, nil},
		{"module list no module", "esxcli system module parameters list", 1, nil, []string{"Error: Missing required parameter -m|--module"}, nil},
		{"module list unknown", "esxcli system module parameters list -m nvidiax", 1, nil, []string{"Error: Unable to find module nvidiax"}, nil},
		{"module set no -p", "esxcli system module parameters set -m nvidia", 1, nil, []string{"Missing required parameter -p|--parameter-string"}, nil},
		{"esxcli unknown namespace", "esxcli system frobnicate list", 1, nil, []string{"Error: Unknown command or namespace system frobnicate list"}, nil},
		{"esxcli bad option", "esxcli system module parameters list -m nvidia --bogus", 1, nil, []string{"Error: Invalid option --bogus"}, nil},
		{"unknown command", "frobnicate --now", 127, nil, []string{"sh: frobnicate: not found\n"}, nil},
		{"syntax", `echo "x`, 2, nil, []string{"syntax error"}, nil},
		{"hostname", "hostname", 0, []string{host + "\n"}, nil, nil},
	}
	sh := &Shell{Backend: newMemBackend(sampleHost(host))}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := sh.Run(host, c.cmd)
			if res.Exit != c.exit {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", res.Exit, c.exit, res.Stdout, res.Stderr)
			}
			for _, s := range c.stdout {
				if !strings.Contains(res.Stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, res.Stdout)
				}
			}
			for _, s := range c.noStdout {
				if strings.Contains(res.Stdout, s) {
					t.Errorf("stdout has %q:\n%s", s, res.Stdout)
				}
			}
			for _, s := range c.stderr {
				if !strings.Contains(res.Stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, res.Stderr)
				}
			}
		})
	}
}

func TestMIGSwitchRules(t *testing.T) {
	const host = "esx01"
	cases := []struct {
		name        string
		hostv       farm.HostInfo
		cmd         string
		out         string
		current     bool // GPU 0's MIG mode right after the command
		afterReboot bool
	}{
		{"ampere enable pending until reboot", sampleHost(host), "nvidia-smi -i 0 -mig 1",
			"Warning: MIG mode is in pending enable state for GPU 00000000:3B:00.0:Not Supported\n" +
				"Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective on GPU 00000000:3B:00.0\nAll done.\n",
			false, true},
		{"hopper idle enable at once", hopperHost(host), "nvidia-smi -i 0 -mig 1",
			"Enabled MIG Mode for GPU 00000000:18:00.0\nAll done.\n", true, true},
		{"hopper busy enable pending", func() farm.HostInfo {
			h := hopperHost(host)
			h.GPUs[0].VGPUs = []farm.Slot{{VM: "vm-1", Profile: "grid_h100xm-40c", Start: -1}, {VM: "vm-2", Profile: "grid_h100xm-40c", Start: -1}}
			return h
		}(),
			"nvidia-smi -i 0 -mig 1", "pending enable state for GPU 00000000:18:00.0:In use by another client\n", false, true},
		{"hopper disable", func() farm.HostInfo {
			h := hopperHost(host)
			h.GPUs[0].MIGCurrent, h.GPUs[0].MIGPending = true, true
			return h
		}(), "nvidia-smi -i 0 -mig 0", "Disabled MIG Mode for GPU 00000000:18:00.0\nAll done.\n", false, false},
		{"already enabled", func() farm.HostInfo {
			h := hopperHost(host)
			h.GPUs[0].MIGCurrent, h.GPUs[0].MIGPending = true, true
			return h
		}(), "nvidia-smi -i 0 -mig 1", "Enabled MIG Mode for GPU 00000000:18:00.0\nAll done.\n", true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newMemBackend(c.hostv)
			sh := &Shell{Backend: b}
			res := sh.Run(host, c.cmd)
			if res.Exit != 0 || !strings.Contains(res.Stdout, c.out) {
				t.Fatalf("exit %d stdout %q stderr %q; want %q", res.Exit, res.Stdout, res.Stderr, c.out)
			}
			csv := sh.Run(host, "nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader -i 0")
			if want := onOff(c.current) + "\n"; csv.Stdout != want {
				t.Errorf("current after command = %q, want %q", csv.Stdout, want)
			}
			b.reboot(host)
			csv = sh.Run(host, "nvidia-smi --query-gpu=mig.mode.current,mig.mode.pending --format=csv,noheader -i 0")
			if want := onOff(c.afterReboot) + ", " + onOff(c.afterReboot) + "\n"; csv.Stdout != want {
				t.Errorf("after reboot = %q, want %q", csv.Stdout, want)
			}
		})
	}
}

func TestMIGAllGPUsSkipsNonCapable(t *testing.T) {
	sh := &Shell{Backend: newMemBackend(sampleHost("h"))}
	res := sh.Run("h", "nvidia-smi -mig 1")
	if res.Exit != 0 {
		t.Fatalf("exit %d: %s %s", res.Exit, res.Stdout, res.Stderr)
	}
	for _, want := range []string{"pending enable state for GPU 00000000:3B:00.0", "Enabled MIG Mode for GPU 00000000:86:00.0",
		"Unable to enable MIG Mode for GPU 00000000:AF:00.0: Not Supported\nTreating as warning and moving on.\n", "All done.\n"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, res.Stdout)
		}
	}
}

func TestModuleParametersSetAndList(t *testing.T) {
	b := newMemBackend(sampleHost("h"))
	sh := &Shell{Backend: b}
	steps := []struct {
		cmd     string
		options string // backend state after the command
	}{
		{`esxcli system module parameters set -m nvidia -p "NVreg_NvLinkDisable=1"`, "NVreg_NvLinkDisable=1"},
		{`esxcli system module parameters set -m nvidia -a -p NVreg_RegistryDwords=RmPVMRL=0x01`, "NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x01"},
		{`esxcli system module parameters set --module=nvidia --parameter-string=NVreg_RegistryDwords=RmPVMRL=0x11`, "NVreg_RegistryDwords=RmPVMRL=0x11"},
		{`esxcli system module parameters set -m nvidia -p ""`, ""},
	}
	for _, s := range steps {
		res := sh.Run("h", s.cmd)
		if res.Exit != 0 || res.Stdout != "" {
			t.Fatalf("%s: exit %d %q %q", s.cmd, res.Exit, res.Stdout, res.Stderr)
		}
		if got := b.configured("h", "nvidia"); got != s.options {
			t.Fatalf("%s: options %q, want %q", s.cmd, got, s.options)
		}
	}
	if _, err := b.Apply("h", ModuleChange{Module: "nvidia", Options: `NVreg_NvLinkDisable=1 NVreg_RegistryDwordsPerDevice="pci=0000:15:00.0;RmPVMRL=0x11"`}); err != nil {
		t.Fatal(err)
	}
	res := sh.Run("h", "esxcli system module parameters list -m nvidia")
	for _, want := range []string{"NVreg_NvLinkDisable            int     1   ", "NVreg_RegistryDwordsPerDevice  string  pci=0000:15:00.0;RmPVMRL=0x11  "} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("list lacks %q:\n%s", want, res.Stdout)
		}
	}
}

// ECC memory: `nvidia-smi -e` sets the pending mode of the selected GPUs through Backend.Apply; --query-gpu and
// -q show current and pending; a reboot puts it in effect.
func TestECCSwitch(t *testing.T) {
	b := newMemBackend(sampleHost("h"))
	sh := &Shell{Backend: b}
	query := func(id string) string {
		return sh.Run("h", "nvidia-smi --query-gpu=ecc.mode.current,ecc.mode.pending --format=csv,noheader -i "+id).Stdout
	}
	res := sh.Run("h", "nvidia-smi -i 0 -e 0")
	if res.Exit != 0 || res.Stdout != "Disabled ECC support for GPU 00000000:3B:00.0.\nAll done.\nReboot required.\n" {
		t.Fatalf("exit %d stdout %q stderr %q", res.Exit, res.Stdout, res.Stderr)
	}
	if got := query("0"); got != "Enabled, Disabled\n" {
		t.Errorf("before reboot %q", got)
	}
	q := sh.Run("h", "nvidia-smi -q -i 0").Stdout
	if want := "    Ecc Mode\n        Current                           : Enabled\n        Pending                           : Disabled\n"; !strings.Contains(q, want) {
		t.Errorf("-q lacks %q:\n%s", want, q)
	}
	b.reboot("h")
	if got := query("0"); got != "Disabled, Disabled\n" {
		t.Errorf("after reboot %q", got)
	}
	res = sh.Run("h", "nvidia-smi --ecc-config=ENABLED")
	if res.Exit != 0 || strings.Count(res.Stdout, "Enabled ECC support for GPU") != 3 {
		t.Errorf("all GPUs: exit %d %q", res.Exit, res.Stdout)
	}
	if got := query("0,2"); got != "Disabled, Enabled\nDisabled, Enabled\n" {
		t.Errorf("after enabling all %q", got)
	}
	if res := sh.Run("h", "nvidia-smi -e 2"); res.Exit != exitInvalidArg || !strings.Contains(res.Stderr, "Invalid combination") {
		t.Errorf("bad value: %+v", res)
	}
	if res := sh.Run("h", "nvidia-smi -e 0 -mig 0"); res.Exit != exitInvalidArg {
		t.Errorf("two actions: %+v", res)
	}
}

// -q says per GPU whether the host's driver runs time-sliced vGPUs of different types at once, as the farm says.
func TestQueryShowsTheDriversTypeMixing(t *testing.T) {
	const line = "        Heterogeneous Time-Slice Profiles : "
	h := sampleHost("h")
	for _, tc := range []struct {
		mixes bool
		want  string
	}{{true, "Supported"}, {false, "Not Supported"}} {
		h.HeterogeneousTypes = tc.mixes
		q := (&Shell{Backend: newMemBackend(h)}).Run("h", "nvidia-smi -q").Stdout
		if got := strings.Count(q, line+tc.want+"\n"); got != len(h.GPUs) {
			t.Errorf("driver mixes types %v: %d GPUs say %q, want %d:\n%s", tc.mixes, got, tc.want, len(h.GPUs), q)
		}
	}
}

// `nvidia-smi -h` lists every option and subcommand option of the tables that has a usage.
func TestHelpListsTheFlagTables(t *testing.T) {
	res := (&Shell{Backend: newMemBackend(sampleHost("h"))}).Run("h", "nvidia-smi -h -i 9")
	if res.Exit != 0 {
		t.Fatalf("%+v", res)
	}
	want := []string{"-L", "-q", "-i <index|bus id|uuid>", "--query-gpu=<fields>", "--format=csv[,noheader][,nounits]",
		"-mig 0|1", "-e 0|1", "mig -lgip", "mig -lgipp", "mig -lgi", "nvlink -s", "topo -m"}
	for _, w := range want {
		if !strings.Contains(res.Stdout, " "+w+",") && !strings.HasSuffix(res.Stdout, " "+w+"\n") {
			t.Errorf("help lacks %q:\n%s", w, res.Stdout)
		}
	}
	for _, cmd := range append([]*smiCommand{&smiMain}, smiSubcommands["mig"], smiSubcommands["nvlink"], smiSubcommands["topo"]) {
		for _, f := range cmd.flags {
			if f.usage != "" && !strings.Contains(res.Stdout, f.usage) {
				t.Errorf("help lacks %q", f.usage)
			}
		}
	}
	if len(smiSubcommandOrder) != len(smiSubcommands) {
		t.Errorf("help order %v does not list every subcommand", smiSubcommandOrder)
	}
}

// Every --query-gpu field of the table answers for every GPU of the sample host, with its unit unless nounits.
func TestQueryFieldsTable(t *testing.T) {
	h := View(sampleHost("h"))
	for name, f := range queryFields {
		if CanonicalField(name) != name {
			t.Errorf("%s is not canonical", name)
		}
		for _, g := range h.GPUs {
			got := RenderQueryCSV(h, []GPU{g}, []string{name}, CSVOptions{NoHeader: true})
			if v := f.value(h, g); v == "" || got != strings.TrimSpace(v+" "+f.unit)+"\n" {
				t.Errorf("%s on GPU %d: %q (value %q)", name, g.Index, got, v)
			}
		}
	}
	for alias, name := range fieldAliases {
		if _, ok := queryFields[name]; !ok || CanonicalField(alias) != name {
			t.Errorf("alias %s -> %s", alias, name)
		}
	}
}
