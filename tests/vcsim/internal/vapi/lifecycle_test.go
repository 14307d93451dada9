package vapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"gpusim/internal/farm"
)

const (
	zip     = "https://depot.example.com/nvidia/NVD-AIE-800_580.65.05.zip"
	oldVer  = "550.90.05-1OEM.800.1.0.20613240"
	newVer  = "580.65.05-1OEM.800.1.0.20613240"
	nvdName = "NVD-AIE-800"
)

// fakeFleet is one image-managed cluster of two hosts on R550 and a depot with R580's component.
type fakeFleet struct {
	mu         sync.Mutex
	installed  map[string]string
	remediated []string
	fail       string // host whose remediation fails
}

func (f *fakeFleet) Clusters() map[string]FleetCluster {
	return map[string]FleetCluster{"domain-c1": {Name: "GPU-Cluster", ImageManaged: true,
		Hosts: []FleetHost{{"host-1", "esx-01"}, {"host-2", "esx-02"}}}}
}

func (f *fakeFleet) Depot(location string) (farm.DepotSpec, error) {
	if location != zip {
		return farm.DepotSpec{}, errors.New("cannot download")
	}
	return farm.DepotSpec{Location: zip, Components: []farm.Component{
		{Name: nvdName, Version: newVer, Vendor: farm.NVIDIA, DisplayName: "NVIDIA AI Enterprise vGPU driver"}}}, nil
}

func (f *fakeFleet) Installed(host string) (string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return nvdName, f.installed[host]
}

func (f *fakeFleet) Remediate(host, location, component string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if host == f.fail {
		return errors.New("the install failed")
	}
	f.remediated = append(f.remediated, host+" "+location)
	f.installed[host] = newVer
	return nil
}

func call(t *testing.T, l *Lifecycle, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	mux := http.NewServeMux()
	for p, f := range l.Routes() {
		mux.HandleFunc(p, f)
	}
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set(sessionHeader, "t")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	return rec
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("%d %s: %v", rec.Code, rec.Body.String(), err)
	}
	return v
}

func waitTask(t *testing.T, l *Lifecycle, id string) lcTask {
	t.Helper()
	for i := 0; i < 200; i++ {
		task := decode[lcTask](t, call(t, l, "GET", tasksPath+id, ""))
		if task.Status != "RUNNING" {
			return task
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("task %s still running", id)
	return lcTask{}
}

func TestDraftCommitApplyOneHostAtATime(t *testing.T) {
	fleet := &fakeFleet{installed: map[string]string{"esx-01": oldVer, "esx-02": oldVer}}
	l := NewLifecycle(fakeUpstream(), fleet)
	if rec := call(t, l, "GET", settingsPath+"clusters/domain-c1/enablement/software", ""); !strings.Contains(rec.Body.String(), "true") {
		t.Fatalf("enablement: %s", rec.Body.String())
	}
	task := decode[string](t, call(t, l, "POST", settingsPath+"depots/offline?vmw-task=true", `{"source_type":"PULL","location":"`+zip+`"}`))
	if got := waitTask(t, l, task); got.Status != "SUCCEEDED" {
		t.Fatalf("import: %+v", got)
	}
	content := call(t, l, "GET", settingsPath+"depot-content/components", "").Body.String()
	if !strings.Contains(content, newVer) || !strings.Contains(content, farm.NVIDIA) {
		t.Fatalf("depot content: %s", content)
	}
	draft := decode[string](t, call(t, l, "POST", settingsPath+"clusters/domain-c1/software/drafts", ""))
	bad := call(t, l, "PATCH", settingsPath+"clusters/domain-c1/software/drafts/"+draft+"/software/components",
		`{"components_to_set":{"NVD-AIE-800":"999.1.1-1OEM"}}`)
	if bad.Code != http.StatusBadRequest {
		t.Fatalf("a version no depot holds: %d", bad.Code)
	}
	if rec := call(t, l, "PATCH", settingsPath+"clusters/domain-c1/software/drafts/"+draft+"/software/components",
		`{"components_to_set":{"NVD-AIE-800":"`+newVer+`"}}`); rec.Code != http.StatusNoContent {
		t.Fatalf("set component: %d %s", rec.Code, rec.Body.String())
	}
	commit := waitTask(t, l, decode[string](t, call(t, l, "POST", settingsPath+"clusters/domain-c1/software/drafts/"+draft+"?action=commit&vmw-task=true", `{"message":"x"}`)))
	if commit.Status != "SUCCEEDED" || commit.Result == nil {
		t.Fatalf("commit: %+v", commit)
	}
	compliance := decode[map[string]any](t, call(t, l, "GET", settingsPath+"clusters/domain-c1/software/compliance", ""))
	if compliance["status"] != "NON_COMPLIANT" {
		t.Fatalf("compliance before apply: %v", compliance)
	}
	apply := decode[string](t, call(t, l, "POST", settingsPath+"clusters/domain-c1/software?action=apply&vmw-task=true",
		`{"hosts":["host-2"],"accept_eula":true}`))
	if got := waitTask(t, l, apply); got.Status != "SUCCEEDED" {
		t.Fatalf("apply: %+v", got)
	}
	if len(fleet.remediated) != 1 || fleet.remediated[0] != "esx-02 "+zip {
		t.Fatalf("remediated %v: only the host asked for", fleet.remediated)
	}
	hosts := decode[map[string]any](t, call(t, l, "GET", settingsPath+"clusters/domain-c1/software/compliance", ""))["hosts"].(map[string]any)
	if hosts["host-2"].(map[string]any)["status"] != "COMPLIANT" || hosts["host-1"].(map[string]any)["status"] != "NON_COMPLIANT" {
		t.Fatalf("per host: %v", hosts)
	}
}

func TestApplyFailsAtAHostThatCannotBeRemediated(t *testing.T) {
	fleet := &fakeFleet{installed: map[string]string{"esx-01": oldVer, "esx-02": oldVer}, fail: "esx-01"}
	l := NewLifecycle(fakeUpstream(), fleet)
	waitTask(t, l, decode[string](t, call(t, l, "POST", settingsPath+"depots/offline?vmw-task=true", `{"location":"`+zip+`"}`)))
	draft := decode[string](t, call(t, l, "POST", settingsPath+"clusters/domain-c1/software/drafts", ""))
	call(t, l, "PATCH", settingsPath+"clusters/domain-c1/software/drafts/"+draft+"/software/components", `{"components_to_set":{"NVD-AIE-800":"`+newVer+`"}}`)
	waitTask(t, l, decode[string](t, call(t, l, "POST", settingsPath+"clusters/domain-c1/software/drafts/"+draft+"?action=commit&vmw-task=true", `{}`)))
	got := waitTask(t, l, decode[string](t, call(t, l, "POST", settingsPath+"clusters/domain-c1/software?action=apply&vmw-task=true", `{}`)))
	if got.Status != "FAILED" || !strings.Contains(toJSON(got.Error), "esx-01") {
		t.Fatalf("apply: %+v", got)
	}
	if len(fleet.remediated) != 0 {
		t.Fatalf("remediation went on past the failed host: %v", fleet.remediated)
	}
}

func TestAnUnreachableDepotFailsItsImport(t *testing.T) {
	l := NewLifecycle(fakeUpstream(), &fakeFleet{installed: map[string]string{}})
	got := waitTask(t, l, decode[string](t, call(t, l, "POST", settingsPath+"depots/offline?vmw-task=true", `{"location":"https://nowhere/x.zip"}`)))
	if got.Status != "FAILED" {
		t.Fatalf("import of an unreachable depot: %+v", got)
	}
	if rec := call(t, l, "GET", settingsPath+"depot-content/components", ""); rec.Body.String() != "[]\n" {
		t.Fatalf("content after a failed import: %s", rec.Body.String())
	}
	if rec := call(t, l, "GET", settingsPath+"clusters/domain-c9/software", ""); rec.Code != http.StatusNotFound {
		t.Fatalf("unknown cluster: %d", rec.Code)
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
