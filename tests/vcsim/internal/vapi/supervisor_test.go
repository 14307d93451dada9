package vapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeUpstream stands for govmomi's vAPI handler: session "t" is valid, VM classes "a" and "b" exist.
func fakeUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(sessionHeader) != "t" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case legacySession, VMClassesPath + "/a", VMClassesPath + "/b":
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
}

func serve(h *Handler, method, path, token, body string) *httptest.ResponseRecorder {
	mux := http.NewServeMux()
	for p, f := range h.Routes() {
		mux.HandleFunc(p, f)
	}
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set(sessionHeader, token)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	return rec
}

func TestValidate(t *testing.T) {
	clusters := []string{"GPU-Cluster", "Other"}
	tests := []struct {
		name string
		sup  Supervisor
		want string
	}{
		{"ok", Supervisor{Clusters: []string{"GPU-Cluster"}, VMClasses: []VMClass{{Name: "a"}},
			Namespaces: []Namespace{{Name: "ns", Cluster: "GPU-Cluster", VMClasses: []string{"a"}}}}, ""},
		{"unknown cluster", Supervisor{Clusters: []string{"Nope"}}, `unknown cluster "Nope"`},
		{"namespace off supervisor", Supervisor{Clusters: []string{"GPU-Cluster"},
			Namespaces: []Namespace{{Name: "ns", Cluster: "Other"}}}, "not one of the supervisor clusters"},
		{"unseeded class", Supervisor{Clusters: []string{"GPU-Cluster"},
			Namespaces: []Namespace{{Name: "ns", Cluster: "GPU-Cluster", VMClasses: []string{"x"}}}}, "is not seeded"},
		{"repeated namespace", Supervisor{Clusters: []string{"GPU-Cluster"}, Namespaces: []Namespace{
			{Name: "ns", Cluster: "GPU-Cluster"}, {Name: "ns", Cluster: "GPU-Cluster"}}}, "empty or repeated"},
		{"services off supervisor", Supervisor{Clusters: []string{"GPU-Cluster"},
			Services: map[string]map[string]string{"Other": {"tkg.vsphere.vmware.com": "3.1.0"}}}, "not one of the supervisor"},
		{"service without version", Supervisor{Clusters: []string{"GPU-Cluster"},
			Services: map[string]map[string]string{"GPU-Cluster": {"tkg.vsphere.vmware.com": ""}}}, "must not be empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sup.Validate(clusters)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestNamespaceRoutes(t *testing.T) {
	tests := []struct {
		name, method, path, token, body string
		status                          int
		wantBody                        string
	}{
		{"no session", "GET", NamespacesPath, "", "", 401, ""},
		{"list", "GET", NamespacesPath, "t", "", 200, `"namespace":"ml-team"`},
		{"get", "GET", NamespacesPath + "/ml-team", "t", "", 200, `"vm_classes":["a"]`},
		{"get missing", "GET", NamespacesPath + "/nope", "t", "", 404, `"error_type":"NOT_FOUND"`},
		{"patch keeps libraries", "PATCH", NamespacesPath + "/ml-team", "t",
			`{"vm_service_spec":{"vm_classes":["a","b"]}}`, 204, ""},
		{"patch unknown class", "PATCH", NamespacesPath + "/ml-team", "t",
			`{"vm_service_spec":{"vm_classes":["zzz"]}}`, 400, "VM class zzz does not exist"},
		{"patch missing", "PATCH", NamespacesPath + "/nope", "t", `{}`, 404, "does not exist"},
		{"create off supervisor", "POST", NamespacesPath, "t", `{"cluster":"domain-c1","namespace":"x"}`, 400,
			"not a supervisor cluster"},
		{"clusters", "GET", ClustersPath, "t", "", 200, `"cluster_name":"GPU-Cluster"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := New(fakeUpstream(), map[string]string{"domain-c9": "GPU-Cluster"})
			if err := h.SeedNamespace("ml-team", "GPU-Cluster", []string{"a"}); err != nil {
				t.Fatal(err)
			}
			h.namespaces["ml-team"].ContentLibraries = []string{"lib-1"}
			rec := serve(h, tc.method, tc.path, tc.token, tc.body)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Fatalf("%s %s = %d %s, want %d with %q", tc.method, tc.path, rec.Code, rec.Body, tc.status, tc.wantBody)
			}
			if tc.name == "patch keeps libraries" {
				ns := h.namespaces["ml-team"]
				if strings.Join(ns.VMClasses, ",") != "a,b" || strings.Join(ns.ContentLibraries, ",") != "lib-1" {
					t.Fatalf("after PATCH: %+v", ns)
				}
			}
		})
	}
}

// The Supervisor Services of a supervisor cluster, listed as ClusterSupervisorServices.list answers; none for a
// supervisor cluster that runs none, 404 for a cluster that is no supervisor.
func TestSupervisorServices(t *testing.T) {
	h := New(fakeUpstream(), map[string]string{"domain-c9": "GPU-Cluster", "domain-c10": "Plain-Supervisor"})
	h.RunServices("domain-c9", map[string]string{"tkg.vsphere.vmware.com": "3.1.0"})
	for _, tc := range []struct {
		path, token string
		status      int
		want        string
	}{
		{ClustersPath + "/domain-c9" + ServicesSuffix, "t", 200,
			`[{"config_status":"CONFIGURED","current_version":"3.1.0","desired_version":"3.1.0","supervisor_service":"tkg.vsphere.vmware.com"}]`},
		{ClustersPath + "/domain-c10" + ServicesSuffix, "t", 200, `[]`},
		{ClustersPath + "/domain-c1" + ServicesSuffix, "t", 404, `"error_type":"NOT_FOUND"`},
		{ClustersPath + "/domain-c9" + ServicesSuffix, "", 401, ""},
	} {
		rec := serve(h, "GET", tc.path, tc.token, "")
		if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("GET %s = %d %s, want %d with %s", tc.path, rec.Code, rec.Body, tc.status, tc.want)
		}
	}
}

func TestFaults(t *testing.T) {
	h := New(fakeUpstream(), map[string]string{"domain-c9": "GPU-Cluster"})
	arm := httptest.NewRequest("POST", "/gpusim/vapi/faults",
		strings.NewReader(`{"method":"GET","path":"/api/vcenter/namespace-management/clusters","status":503,"count":1}`))
	rec := httptest.NewRecorder()
	h.ServeFaults(rec, arm)
	if rec.Code != 200 {
		t.Fatalf("arm: %d %s", rec.Code, rec.Body)
	}
	first := serve(h, "GET", ClustersPath, "t", "")
	var body struct {
		ErrorType string `json:"error_type"`
	}
	if first.Code != 503 || json.Unmarshal(first.Body.Bytes(), &body) != nil || body.ErrorType != "SERVICE_UNAVAILABLE" {
		t.Fatalf("armed: %d %s", first.Code, first.Body)
	}
	if second := serve(h, "GET", ClustersPath, "t", ""); second.Code != 200 {
		t.Fatalf("a count-1 fault answered twice: %d", second.Code)
	}
	bad := httptest.NewRecorder()
	h.ServeFaults(bad, httptest.NewRequest("POST", "/gpusim/vapi/faults", strings.NewReader(`{"path":"/api","status":200}`)))
	if bad.Code != 400 {
		t.Fatalf("a 200 fault was accepted: %d", bad.Code)
	}
}

// A gpusim told to honour one spelling of the VM class memory field passes only that one on to govmomi
// (whose JSON decoding takes both); left unset it passes both.
func TestVMClassMemoryFieldSpellings(t *testing.T) {
	for _, tc := range []struct{ honour, want string }{
		{"", `{"memory_MB":1,"memory_mb":2}`},
		{MemoryFieldUpper, `{"memory_MB":1}`},
		{MemoryFieldLower, `{"memory_mb":2}`},
	} {
		var got string
		upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var body map[string]json.RawMessage
			_ = json.NewDecoder(r.Body).Decode(&body)
			out, _ := json.Marshal(body)
			got = string(out)
		})
		h := New(upstream, nil)
		h.HonourMemoryField(tc.honour)
		serve(h, http.MethodPost, VMClassesPath, "t", `{"memory_MB": 1, "memory_mb": 2}`)
		if got != tc.want {
			t.Errorf("honour %q: upstream got %s, want %s", tc.honour, got, tc.want)
		}
	}
	if err := (&Supervisor{MemoryField: "memoryMB"}).Validate(nil); err == nil || !strings.Contains(err.Error(), "memory_field") {
		t.Errorf("Validate() = %v", err)
	}
}
