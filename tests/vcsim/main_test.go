package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestBadInputExitsTwo(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"-frobnicate"}, "flag provided but not defined"},
		{"unknown model flag", []string{"-model", "V100"}, "unknown GPU model"},
		{"bad nvlink", []string{"-nvlink", "ring"}, "nvlink"},
		{"negative hosts", []string{"-hosts", "-1"}, "hosts"},
		{"extra argument", []string{"extra"}, "unexpected argument"},
		{"bad listen address", []string{"-listen", "nonsense"}, "-listen"},
		{"empty host domain", []string{"-host-domain", ""}, "host_domain"},
		{"farm with topology flag", []string{"-farm", write("ok.yaml", "clusters: []\n"), "-hosts", "2"}, "cannot be combined"},
		{"farm unknown model", []string{"-farm", write("m.yaml", "clusters:\n  - {name: c, hosts: 1, gpus_per_host: 2, model: X100}\n")}, "unknown GPU model"},
		{"farm malformed field", []string{"-farm", write("f.yaml", "clusters:\n  - {name: c, hosts: many}\n")}, "farm file"},
		{"farm unknown field", []string{"-farm", write("u.yaml", "clusterz: []\n")}, "not found"},
		{"farm missing", []string{"-farm", filepath.Join(dir, "none.yaml")}, "no such file"},
		{"farm VM unknown profile", []string{"-farm", write("p.yaml", "vms:\n  - {name: v, vgpus: [grid_a100-99c]}\n")}, "unknown vGPU profile"},
		{"farm bad prefix", []string{"-farm", write("x.yaml", "clusters:\n  - {name: c, hosts: 1, model: L40S, profile_prefix: nv_}\n")}, "profile prefix"},
		{"farm bad json", []string{"-farm", write("b.json", `{"clusters": [{"name": "c", "hosts": 1, "model": "A100-40GB", "nvlink": "mesh"}]}`)}, "nvlink"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tc.args, &out, &errb, make(chan os.Signal))
			if code != 2 {
				t.Fatalf("exit %d, want 2 (stderr %q)", code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("stderr %q does not mention %q", errb.String(), tc.want)
			}
		})
	}
}

func TestRunPrintsEnvAndStops(t *testing.T) {
	dir := t.TempDir()
	farmFile := filepath.Join(dir, "farm.json")
	body := `{"clusters": [{"name": "C1", "hosts": 1, "gpus_per_host": 2, "model": "H100-80GB", "nvlink": "pairs",
	  "graphics_type": "sharedDirect"}], "templates": [{"name": "t1"}], "vm_count": 2}`
	if err := os.WriteFile(farmFile, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(dir, "env")
	stop := make(chan os.Signal, 1)
	done := make(chan int)
	var out, errb bytes.Buffer
	go func() { done <- run([]string{"-farm", farmFile, "-env-file", envFile, "-no-ssh"}, &out, &errb, stop) }()
	var data []byte
	for i := 0; i < 500; i++ {
		data, _ = os.ReadFile(envFile)
		if len(data) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	line := string(data)
	for _, key := range []string{"export VGPUCTL_URL=https://127.0.0.1:", "VGPUCTL_USERNAME=", "VGPUCTL_PASSWORD=", "VGPUCTL_THUMBPRINT=", "GPUSIM_CONTROL=https://"} {
		if !strings.Contains(line, key) {
			t.Fatalf("env line %q lacks %s (stderr %q)", line, key, errb.String())
		}
	}
	// the certificate is pinned, never trusted blindly
	if strings.Contains(line, "INSECURE") || !regexp.MustCompile(`VGPUCTL_THUMBPRINT=([0-9A-F]{2}:){31}[0-9A-F]{2}\b`).MatchString(line) {
		t.Fatalf("env line %q does not pin the certificate by its sha256 thumbprint", line)
	}
	stop <- syscall.SIGTERM
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out.String(), "export VGPUCTL_URL=") {
		t.Fatalf("stdout %q", out.String())
	}
}

func TestListenFailureIsAnError(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"-listen", "192.0.2.1:1", "-hosts", "1", "-gpus", "1", "-no-ssh"}, &out, &errb, make(chan os.Signal))
	if code != 1 || !strings.Contains(errb.String(), "listen") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

func TestShellQuote(t *testing.T) {
	if got := shellQuote("a b'c"); got != `'a b'\''c'` {
		t.Fatal(got)
	}
	if got := shellQuote("https://127.0.0.1:1/sdk"); got != "https://127.0.0.1:1/sdk" {
		t.Fatal(got)
	}
}

func TestModelsAndCatalogueFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-models"}, &out, &errb, make(chan os.Signal)); code != 0 {
		t.Fatalf("-models exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for _, want := range []string{"A100-40GB", "A100-80GB", "H100-80GB", "L40S", "H100-SXM5-80GB", "A100-HGX-40GB", "A16"} {
		if !slices.Contains(lines, want) {
			t.Errorf("-models lacks %s: %q", want, lines)
		}
	}
	out.Reset()
	mini := filepath.Join("internal", "farm", "testdata", "mini-catalogue.yaml")
	if code := run([]string{"-catalogue", mini, "-models"}, &out, &errb, make(chan os.Signal)); code != 0 || out.String() != "TEST-16GB\n" {
		t.Fatalf("-catalogue mini -models: exit %d, %q", code, out.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nboards: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for args, want := range map[string]string{
		"-catalogue " + bad: "no boards",
		"-catalogue " + filepath.Join(t.TempDir(), "missing"): "-catalogue",
		"-catalogue " + mini + " -model A100-40GB":            `unknown GPU model "A100-40GB" (known: TEST-16GB)`,
	} {
		errb.Reset()
		if code := run(strings.Fields(args), &out, &errb, make(chan os.Signal)); code != 2 || !strings.Contains(errb.String(), want) {
			t.Errorf("%s: exit %d, stderr %q, want %q", args, code, errb.String(), want)
		}
	}
}
