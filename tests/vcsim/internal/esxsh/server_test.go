package esxsh

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

const (
	testUser = "root"
	testPass = "s3cret"
)

type fixture struct {
	srv     *Server
	backend *memBackend
	dir     string
	client  ssh.Signer // the test's key, listed in AuthorizedKeys
}

func startServer(t *testing.T, stateDir string) *fixture {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	b := newMemBackend(sampleHost("esx01.example.com"), hopperHost("esx02.example.com"))
	srv := New(Config{Backend: b, User: testUser, Password: testPass, StateDir: stateDir,
		AuthorizedKeys: []ssh.PublicKey{signer.PublicKey()}})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	dir := t.TempDir()
	if _, _, err := srv.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	return &fixture{srv: srv, backend: b, dir: dir, client: signer}
}

// dial connects to a host with host-key checking against the known_hosts file the server wrote.
func (f *fixture) dial(t *testing.T, host string, auth ...ssh.AuthMethod) (*ssh.Client, error) {
	t.Helper()
	cb, err := knownhosts.New(filepath.Join(f.dir, "ssh_known_hosts"))
	if err != nil {
		t.Fatal(err)
	}
	if len(auth) == 0 {
		auth = []ssh.AuthMethod{ssh.Password(testPass)}
	}
	return ssh.Dial("tcp", f.srv.Endpoints()[host].Address, &ssh.ClientConfig{
		User: testUser, Auth: auth, HostKeyCallback: cb, Timeout: 10 * time.Second})
}

func (f *fixture) mustDial(t *testing.T, host string) *ssh.Client {
	t.Helper()
	c, err := f.dial(t, host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// run executes one command; exit is -1 when the session ended without an exit status.
func run(t *testing.T, c *ssh.Client, cmd string) (stdout, stderr string, exit int) {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var o, e bytes.Buffer
	sess.Stdout, sess.Stderr = &o, &e
	err = sess.Run(cmd)
	var ee *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case err == nil:
		return o.String(), e.String(), 0
	case errors.As(err, &ee):
		return o.String(), e.String(), ee.ExitStatus()
	case errors.As(err, &missing), errors.Is(err, io.EOF):
		return o.String(), e.String(), -1
	}
	t.Fatalf("%s: %v", cmd, err)
	return "", "", 0
}

func TestSSHCommands(t *testing.T) {
	f := startServer(t, "")
	c := f.mustDial(t, "esx01.example.com")
	cases := []struct {
		cmd    string
		exit   int
		stdout string
		stderr string
	}{
		{"nvidia-smi -L", 0, "GPU 2: NVIDIA L40S (UUID: GPU-77aa66bb", ""},
		{"nvidia-smi -q -i 1", 0, "        Current                           : Enabled", ""},
		{"nvidia-smi --query-gpu=index,pci.bus_id,name,memory.total,mig.mode.current,mig.mode.pending --format=csv,noheader", 0,
			"0, 00000000:3B:00.0, NVIDIA A100-PCIE-40GB, 40960 MiB, Disabled, Disabled\n", ""},
		{"nvidia-smi mig -lgip", 0, "|   1  MIG 3g.20gb        9     1/2", ""},
		{"nvidia-smi mig -lgipp", 0, "GPU  1 Profile ID 14 Placements: {0,2,4}:2", ""},
		{"nvidia-smi nvlink -s", 0, "\t Link 0: 25 GB/s", ""},
		{"nvidia-smi topo -m", 0, "GPU1\tNV4\t X \tSYS", ""},
		{"esxcli system module parameters list -m nvidia", 0, "NVreg_NvLinkDisable", ""},
		{"nvidia-smi -i 9 -L", 6, "No devices were found", ""},
		{"nvidia-smi --bogus", 2, "", "ERROR: Option --bogus is not recognized."},
		{"esxcli system module parameters list", 1, "", "Missing required parameter -m|--module"},
		{"vmkfstools -l", 127, "", "sh: vmkfstools: not found"},
	}
	for _, tc := range cases {
		t.Run(tc.cmd, func(t *testing.T) {
			out, errOut, exit := run(t, c, tc.cmd)
			if exit != tc.exit || !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) {
				t.Errorf("exit %d (want %d)\nstdout: %q (want %q)\nstderr: %q (want %q)", exit, tc.exit, out, tc.stdout, errOut, tc.stderr)
			}
		})
	}
}

func TestSSHMIGAndModuleChangesReachBackend(t *testing.T) {
	f := startServer(t, "")
	c := f.mustDial(t, "esx02.example.com")
	out, _, exit := run(t, c, "nvidia-smi -i 1 -mig 1")
	if exit != 0 || out != "Enabled MIG Mode for GPU 00000000:2A:00.0\nAll done.\n" {
		t.Fatalf("exit %d: %q", exit, out)
	}
	if h, _ := f.backend.Host("esx02.example.com"); !h.GPUs[1].MIGCurrent || h.GPUs[0].MIGCurrent {
		t.Errorf("backend MIG state: %+v", h.GPUs)
	}
	if _, _, exit := run(t, c, `esxcli system module parameters set -m nvidia -p "NVreg_NvLinkDisable=1"`); exit != 0 {
		t.Fatalf("set exit %d", exit)
	}
	if got := f.backend.configured("esx02.example.com", "nvidia"); got != "NVreg_NvLinkDisable=1" {
		t.Errorf("module options %q", got)
	}
}

func TestSSHAuthentication(t *testing.T) {
	f := startServer(t, "")
	_, wrongKey, _ := ed25519.GenerateKey(rand.Reader)
	wrongSigner, _ := ssh.NewSignerFromKey(wrongKey)
	cases := []struct {
		name string
		auth []ssh.AuthMethod
		ok   bool
	}{
		{"password", []ssh.AuthMethod{ssh.Password(testPass)}, true},
		{"wrong password", []ssh.AuthMethod{ssh.Password("nope")}, false},
		{"keyboard-interactive", []ssh.AuthMethod{ssh.KeyboardInteractive(func(_, _ string, q []string, _ []bool) ([]string, error) {
			return []string{testPass}, nil
		})}, true},
		{"authorized key", []ssh.AuthMethod{ssh.PublicKeys(f.client)}, true},
		{"unknown key", []ssh.AuthMethod{ssh.PublicKeys(wrongSigner)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl, err := f.dial(t, "esx01.example.com", c.auth...)
			if cl != nil {
				_ = cl.Close()
			}
			if (err == nil) != c.ok {
				t.Errorf("dial err = %v, want ok=%v", err, c.ok)
			}
		})
	}
}

func TestSSHHostKeysPerHostAndPersistent(t *testing.T) {
	state := t.TempDir()
	f := startServer(t, state)
	eps := f.srv.Endpoints()
	if eps["esx01.example.com"].Fingerprint == eps["esx02.example.com"].Fingerprint {
		t.Fatal("two hosts share a host key")
	}
	// known_hosts names both the address and the host name.
	kh, _ := os.ReadFile(filepath.Join(f.dir, "ssh_known_hosts"))
	if !strings.Contains(string(kh), "["+"127.0.0.1]:") || !strings.Contains(string(kh), ",esx01.example.com ssh-ed25519 ") {
		t.Errorf("known_hosts:\n%s", kh)
	}
	var m map[string]Endpoint
	data, _ := os.ReadFile(filepath.Join(f.dir, "ssh_hosts.json"))
	if err := json.Unmarshal(data, &m); err != nil || m["esx02.example.com"].Port != eps["esx02.example.com"].Port {
		t.Errorf("host map %s: %v", data, err)
	}
	// A key that is not the host's is rejected by known_hosts checking: ask esx01's port with esx02's entry.
	cb, _ := knownhosts.New(filepath.Join(f.dir, "ssh_known_hosts"))
	pub02, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(eps["esx02.example.com"].HostKey))
	addr01 := eps["esx01.example.com"].Address
	tcp, _ := net.ResolveTCPAddr("tcp", addr01)
	var keyErr *knownhosts.KeyError
	if err := cb(addr01, tcp, pub02); !errors.As(err, &keyErr) || len(keyErr.Want) == 0 {
		t.Errorf("mismatching key accepted: %v", err)
	}
	// Unknown host: an empty known_hosts refuses.
	empty := filepath.Join(t.TempDir(), "empty")
	_ = os.WriteFile(empty, nil, 0o644)
	cbEmpty, _ := knownhosts.New(empty)
	if _, err := ssh.Dial("tcp", addr01, &ssh.ClientConfig{User: testUser, Auth: []ssh.AuthMethod{ssh.Password(testPass)},
		HostKeyCallback: cbEmpty, Timeout: 10 * time.Second}); err == nil || !strings.Contains(err.Error(), "key is unknown") {
		t.Errorf("unknown host key accepted: %v", err)
	}
	// Restart with the same state dir: same keys.
	_ = f.srv.Close()
	f2 := startServer(t, state)
	for host, ep := range f2.srv.Endpoints() {
		if ep.Fingerprint != eps[host].Fingerprint {
			t.Errorf("%s: host key changed across restart", host)
		}
	}
	f2.mustDial(t, "esx01.example.com")
}

func TestSSHUnreachableHostClosesConnections(t *testing.T) {
	f := startServer(t, "")
	c := f.mustDial(t, "esx01.example.com")
	f.backend.setDown("esx01.example.com", true)
	if _, _, exit := run(t, c, "nvidia-smi -L"); exit != -1 {
		t.Errorf("command on a host that went down exited %d", exit)
	}
	if _, err := f.dial(t, "esx01.example.com"); err == nil {
		t.Error("dial to a down host succeeded")
	}
	f.backend.setDown("esx01.example.com", false)
	f.mustDial(t, "esx01.example.com")
}

func TestSSHFaults(t *testing.T) {
	f := startServer(t, "")
	host := "esx01.example.com"

	t.Run("fail", func(t *testing.T) {
		c := f.mustDial(t, host)
		if _, err := f.srv.AddFault(Fault{Host: host, Kind: FaultFail, Match: "-mig", Exit: 9, Stderr: "GPU is lost\n", Times: 1}); err != nil {
			t.Fatal(err)
		}
		_, errOut, exit := run(t, c, "nvidia-smi -i 0 -mig 1")
		if exit != 9 || errOut != "GPU is lost\n" {
			t.Errorf("exit %d stderr %q", exit, errOut)
		}
		if h, _ := f.backend.Host(host); h.GPUs[0].MIGPending {
			t.Error("a failed command changed state")
		}
		if _, _, exit := run(t, c, "nvidia-smi -i 0 -mig 1"); exit != 0 {
			t.Errorf("times=1 fault fired twice (exit %d)", exit)
		}
		if _, _, exit := run(t, c, "nvidia-smi -L"); exit != 0 {
			t.Error("non-matching command failed")
		}
	})

	t.Run("hang until client gives up", func(t *testing.T) {
		c := f.mustDial(t, host)
		if _, err := f.srv.AddFault(Fault{Host: host, Kind: FaultHang, Match: "nvidia-smi -q"}); err != nil {
			t.Fatal(err)
		}
		defer f.srv.ClearFaults("")
		sess, _ := c.NewSession()
		done := make(chan error, 1)
		go func() { done <- sess.Run("nvidia-smi -q") }()
		select {
		case err := <-done:
			t.Fatalf("hanging command returned: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		_ = sess.Close() // the client gives up; the connection stays usable
		if out, _, exit := run(t, c, "nvidia-smi -L"); exit != 0 || out == "" {
			t.Errorf("connection unusable after a hang: %d", exit)
		}
	})

	t.Run("hang released by clear", func(t *testing.T) {
		c := f.mustDial(t, host)
		_, _ = f.srv.AddFault(Fault{Kind: FaultHang})
		done := make(chan int, 1)
		go func() { _, _, exit := run(t, c, "hostname"); done <- exit }()
		time.Sleep(200 * time.Millisecond)
		select {
		case <-done:
			t.Fatal("command did not hang")
		default:
		}
		_ = f.srv.ClearFaults("")
		if exit := <-done; exit != 0 {
			t.Errorf("released command exit %d", exit)
		}
	})

	t.Run("drop", func(t *testing.T) {
		c := f.mustDial(t, host)
		_, _ = f.srv.AddFault(Fault{Host: host, Kind: FaultDrop, Match: "topo", Times: 1})
		if _, _, exit := run(t, c, "nvidia-smi topo -m"); exit != -1 {
			t.Errorf("dropped session exit %d", exit)
		}
		if _, err := c.NewSession(); err == nil {
			t.Error("connection still open after drop")
		}
		f.mustDial(t, host)
	})

	t.Run("refuse", func(t *testing.T) {
		_, _ = f.srv.AddFault(Fault{Host: host, Kind: FaultRefuse})
		if _, err := f.dial(t, host); err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("dial to refusing host: %v", err)
		}
		f.mustDial(t, "esx02.example.com") // other hosts unaffected
		_ = f.srv.ClearFaults(host)
		f.mustDial(t, host)
	})

	t.Run("bad fault", func(t *testing.T) {
		if _, err := f.srv.AddFault(Fault{Kind: "explode"}); err == nil {
			t.Error("unknown kind accepted")
		}
		if _, err := f.srv.AddFault(Fault{Kind: FaultFail, Host: "nope"}); err == nil {
			t.Error("unknown host accepted")
		}
	})
}

func TestControlHandler(t *testing.T) {
	f := startServer(t, "")
	ts := httptest.NewServer(f.srv.ControlHandler("/gpusim/ssh"))
	defer ts.Close()

	resp, err := http.Get(ts.URL + "/gpusim/ssh")
	if err != nil {
		t.Fatal(err)
	}
	var info Info
	_ = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if info.User != testUser || len(info.Hosts) != 2 || info.KnownHosts != filepath.Join(f.dir, "ssh_known_hosts") {
		t.Errorf("info %+v", info)
	}

	body := `{"host":"esx01.example.com","kind":"fail","match":"-L","exit":4,"stderr":"Insufficient Permissions\n"}`
	resp, _ = http.Post(ts.URL+"/gpusim/ssh/faults", "application/json", strings.NewReader(body))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST fault: %d", resp.StatusCode)
	}
	resp.Body.Close()
	c := f.mustDial(t, "esx01.example.com")
	if _, e, exit := run(t, c, "nvidia-smi -L"); exit != 4 || e != "Insufficient Permissions\n" {
		t.Errorf("armed fault: exit %d %q", exit, e)
	}
	resp, _ = http.Post(ts.URL+"/gpusim/ssh/faults", "application/json", strings.NewReader(`{"kind":"nope"}`))
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad fault status %d", resp.StatusCode)
	}
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodDelete, ts.URL+"/gpusim/ssh/faults", nil)
	resp, _ = http.DefaultClient.Do(req)
	resp.Body.Close()
	if _, _, exit := run(t, c, "nvidia-smi -L"); exit != 0 {
		t.Errorf("fault survived DELETE: exit %d", exit)
	}
	resp, _ = http.Get(ts.URL + "/gpusim/ssh/known_hosts")
	kh, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(kh), "esx02.example.com ssh-ed25519") {
		t.Errorf("known_hosts route: %s", kh)
	}
}

func TestInteractiveShell(t *testing.T) {
	f := startServer(t, "")
	c := f.mustDial(t, "esx01.example.com")
	sess, _ := c.NewSession()
	defer sess.Close()
	var out bytes.Buffer
	sess.Stdout = &out
	sess.Stdin = strings.NewReader("hostname\nexit\n")
	if err := sess.Shell(); err != nil {
		t.Fatal(err)
	}
	if err := sess.Wait(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "[root@esx01.example.com:~] esx01.example.com\n") {
		t.Errorf("shell output %q", out.String())
	}
}
