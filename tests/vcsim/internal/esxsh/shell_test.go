package esxsh

import (
	"strings"
	"testing"
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
		hostv       Host
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
		{"hopper busy enable pending", func() Host { h := hopperHost(host); h.GPUs[0].ActiveVGPUs = 2; return h }(),
			"nvidia-smi -i 0 -mig 1", "pending enable state for GPU 00000000:18:00.0:In use by another client\n", false, true},
		{"hopper disable", func() Host {
			h := hopperHost(host)
			h.GPUs[0].MIGCurrent, h.GPUs[0].MIGPending = true, true
			return h
		}(), "nvidia-smi -i 0 -mig 0", "Disabled MIG Mode for GPU 00000000:18:00.0\nAll done.\n", false, false},
		{"already enabled", func() Host {
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
		if got, _, _ := b.ModuleOptions("h", "nvidia"); got != s.options {
			t.Fatalf("%s: options %q, want %q", s.cmd, got, s.options)
		}
	}
	_ = b.SetModuleOptions("h", "nvidia", `NVreg_NvLinkDisable=1 NVreg_RegistryDwordsPerDevice="pci=0000:15:00.0;RmPVMRL=0x11"`)
	res := sh.Run("h", "esxcli system module parameters list -m nvidia")
	for _, want := range []string{"NVreg_NvLinkDisable            int     1   ", "NVreg_RegistryDwordsPerDevice  string  pci=0000:15:00.0;RmPVMRL=0x11  "} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("list lacks %q:\n%s", want, res.Stdout)
		}
	}
}
