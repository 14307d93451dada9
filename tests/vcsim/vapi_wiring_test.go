package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const supervisorFarm = `{"clusters": [{"name": "GPU-Cluster", "hosts": 1, "gpus_per_host": 1, "model": "A100-40GB"},
  {"name": "Plain", "hosts": 1, "gpus_per_host": 1, "model": "A100-40GB"}], "templates": [],
  "supervisor": {"clusters": ["GPU-Cluster"],
    "vm_classes": [{"name": "gpu-small", "cpus": 2, "memory_mb": 4096, "vgpus": ["grid_a100-10c"]}],
    "namespaces": [{"name": "ml-team", "cluster": "GPU-Cluster", "vm_classes": ["gpu-small"]}],
    "services": {"GPU-Cluster": {"tkg.vsphere.vmware.com": "3.1.0"}}}}`

func TestSupervisorSectionErrors(t *testing.T) {
	tests := []struct{ name, supervisor, want string }{
		{"unknown cluster", `{"clusters": ["Nope"]}`, `supervisor: unknown cluster "Nope"`},
		{"namespace off supervisor", `{"clusters": ["GPU-Cluster"], "namespaces": [{"name": "n", "cluster": "Plain"}]}`,
			"not one of the supervisor clusters"},
		{"unseeded class", `{"clusters": ["GPU-Cluster"], "namespaces": [{"name": "n", "cluster": "GPU-Cluster", "vm_classes": ["x"]}]}`,
			"is not seeded"},
		{"services off supervisor", `{"clusters": ["GPU-Cluster"], "services": {"Plain": {"tkg.vsphere.vmware.com": "3.1.0"}}}`,
			"not one of the supervisor clusters"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			farm := filepath.Join(t.TempDir(), "farm.json")
			body := `{"clusters": [{"name": "GPU-Cluster", "hosts": 1, "gpus_per_host": 1, "model": "A100-40GB"},
			  {"name": "Plain", "hosts": 1, "gpus_per_host": 1, "model": "A100-40GB"}], "supervisor": ` + tc.supervisor + `}`
			if err := os.WriteFile(farm, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if code := run([]string{"-farm", farm, "-no-ssh"}, &out, &errb, make(chan os.Signal)); code == 0 ||
				!strings.Contains(errb.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q, want %q", code, errb.String(), tc.want)
			}
		})
	}
}

func TestVAPIServesSupervisorRoutes(t *testing.T) {
	dir := t.TempDir()
	farm, envFile := filepath.Join(dir, "farm.json"), filepath.Join(dir, "env")
	if err := os.WriteFile(farm, []byte(supervisorFarm), 0o600); err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan os.Signal, 1), make(chan int)
	var out, errb bytes.Buffer
	go func() { done <- run([]string{"-farm", farm, "-env-file", envFile, "-no-ssh"}, &out, &errb, stop) }()
	defer func() {
		stop <- syscall.SIGTERM
		if code := <-done; code != 0 {
			t.Errorf("exit %d: %s", code, errb.String())
		}
	}()
	var line string
	for i := 0; i < 500 && !strings.HasSuffix(line, "\n"); i++ {
		data, _ := os.ReadFile(envFile)
		line = string(data)
		time.Sleep(20 * time.Millisecond)
	}
	start := strings.Index(line, "VGPUCTL_URL=")
	if start < 0 {
		t.Fatalf("no URL in %q (stderr %q)", line, errb.String())
	}
	base := strings.TrimSuffix(strings.Fields(line[start+len("VGPUCTL_URL="):])[0], "/sdk")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

	req, _ := http.NewRequest("POST", base+"/rest/com/vmware/cis/session", nil)
	req.SetBasicAuth("user", "pass")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var login struct{ Value string }
	_ = json.NewDecoder(resp.Body).Decode(&login)
	resp.Body.Close()
	get := func(path string) (int, string) {
		r, _ := http.NewRequest("GET", base+path, nil)
		r.Header.Set("vmware-api-session-id", login.Value)
		resp, err := client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	for _, tc := range []struct {
		path   string
		status int
		want   string
	}{
		{"/api/vcenter/namespace-management/clusters", 200, `"cluster_name":"GPU-Cluster"`},
		{"/api/vcenter/namespaces/instances/ml-team", 200, `"vm_classes":["gpu-small"]`},
		{"/api/vcenter/namespace-management/virtual-machine-classes/gpu-small", 200, `"profile_name":"grid_a100-10c"`},
	} {
		if status, body := get(tc.path); status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d %s, want %d with %s", tc.path, status, body, tc.status, tc.want)
		}
	}
	// the farm file's services, listed for the supervisor cluster by its moid
	_, listed := get("/api/vcenter/namespace-management/clusters")
	var clusters []struct{ Cluster string }
	if err := json.Unmarshal([]byte(listed), &clusters); err != nil || len(clusters) != 1 {
		t.Fatalf("clusters: %s (%v)", listed, err)
	}
	status, services := get("/api/vcenter/namespace-management/clusters/" + clusters[0].Cluster + "/supervisor-services")
	if status != 200 || !strings.Contains(services, `"supervisor_service":"tkg.vsphere.vmware.com"`) ||
		!strings.Contains(services, `"current_version":"3.1.0"`) {
		t.Errorf("supervisor services = %d %s", status, services)
	}
}
