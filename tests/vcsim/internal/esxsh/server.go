package esxsh

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Config configures the SSH endpoints.
type Config struct {
	Backend        Backend
	User           string          // login name accepted (ESXi: root)
	Password       string          // password accepted for User; empty disables password logins
	AuthorizedKeys []ssh.PublicKey // public keys accepted for User
	StateDir       string          // when set, host keys persist in StateDir/ssh-hostkeys/
	ListenHost     string          // default 127.0.0.1
	PortBase       int             // when > 0, host i (sorted by name) listens on PortBase+i; else a free port
	Logf           func(format string, a ...any)
}

// Server serves one SSH endpoint (own port, own host key) per simulated host.
//
// A port per host, not one port with the host chosen by login name: host keys are per host, and an SSH
// client checks the key before it sends the user name, so only a port per host lets each host present
// its own key and lets known_hosts pin it.
type Server struct {
	cfg    Config
	shell  *Shell
	faults *faultSet

	mu     sync.Mutex
	hosts  map[string]*endpoint
	closed bool
	files  struct{ knownHosts, hostMap string }
	remove []string // directories removed by Close
}

// RemoveOnClose makes Close delete dir (a temporary directory holding the files of WriteFiles).
func (s *Server) RemoveOnClose(dir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remove = append(s.remove, dir)
}

type endpoint struct {
	name   string
	signer ssh.Signer
	port   int
	ln     net.Listener // nil while refusing
	conns  map[net.Conn]struct{}
}

// Endpoint is the public description of one host's SSH endpoint.
type Endpoint struct {
	Host        string `json:"host"`
	Port        int    `json:"port"`
	Address     string `json:"address"`
	HostKey     string `json:"host_key"`
	Fingerprint string `json:"fingerprint"`
}

// New creates the server; Start opens the listeners.
func New(cfg Config) *Server {
	if cfg.ListenHost == "" {
		cfg.ListenHost = "127.0.0.1"
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Server{cfg: cfg, shell: &Shell{Backend: cfg.Backend}, faults: newFaultSet(), hosts: map[string]*endpoint{}}
}

// Start opens an endpoint for every host the backend lists (and for hosts added since the last call).
func (s *Server) Start() error {
	names := s.cfg.Backend.HostNames()
	sort.Strings(names)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, name := range names {
		if _, ok := s.hosts[name]; ok {
			continue
		}
		signer, err := s.hostKey(name)
		if err != nil {
			return err
		}
		ep := &endpoint{name: name, signer: signer, conns: map[net.Conn]struct{}{}}
		if s.cfg.PortBase > 0 {
			ep.port = s.cfg.PortBase + i
		}
		if err := s.listen(ep); err != nil {
			return err
		}
		s.hosts[name] = ep
	}
	return nil
}

// listen opens ep's listener (on its previous port when it had one). Called with s.mu held.
func (s *Server) listen(ep *endpoint) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(s.cfg.ListenHost, strconv.Itoa(ep.port)))
	if err != nil {
		return fmt.Errorf("ssh endpoint for %s: %w", ep.name, err)
	}
	ep.ln = ln
	ep.port = ln.Addr().(*net.TCPAddr).Port
	go s.acceptLoop(ep, ln)
	return nil
}

// Close stops every endpoint and drops every connection.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, ep := range s.hosts {
		if ep.ln != nil {
			_ = ep.ln.Close()
			ep.ln = nil
		}
		for c := range ep.conns {
			_ = c.Close()
		}
	}
	for _, dir := range s.remove {
		_ = os.RemoveAll(dir)
	}
	s.remove = nil
	s.faults.clear("")
	return nil
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// hostKey loads or creates the ed25519 host key of a host.
func (s *Server) hostKey(host string) (ssh.Signer, error) {
	var file string
	if s.cfg.StateDir != "" {
		dir := filepath.Join(s.cfg.StateDir, "ssh-hostkeys")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		file = filepath.Join(dir, unsafeName.ReplaceAllString(host, "_")+".key")
		if data, err := os.ReadFile(file); err == nil {
			return ssh.ParsePrivateKey(data)
		}
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	if file != "" {
		block, err := ssh.MarshalPrivateKey(priv, "gpusim host key for "+host)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, err
		}
	}
	return ssh.NewSignerFromKey(priv)
}

// Endpoints describes every host's endpoint, by host name.
func (s *Server) Endpoints() map[string]Endpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Endpoint{}
	for name, ep := range s.hosts {
		pub := ep.signer.PublicKey()
		out[name] = Endpoint{
			Host:        s.cfg.ListenHost,
			Port:        ep.port,
			Address:     net.JoinHostPort(s.cfg.ListenHost, strconv.Itoa(ep.port)),
			HostKey:     string(ssh.MarshalAuthorizedKey(pub)[:len(ssh.MarshalAuthorizedKey(pub))-1]),
			Fingerprint: ssh.FingerprintSHA256(pub),
		}
	}
	return out
}

// KnownHosts is a known_hosts file for all endpoints: each line names the address ([127.0.0.1]:port)
// and the host name.
func (s *Server) KnownHosts() string {
	eps := s.Endpoints()
	names := make([]string, 0, len(eps))
	for n := range eps {
		names = append(names, n)
	}
	sort.Strings(names)
	out := ""
	for _, n := range names {
		ep := eps[n]
		pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(ep.HostKey))
		if err != nil {
			continue
		}
		out += knownhosts.Line([]string{knownhosts.Normalize(ep.Address), n}, pub) + "\n"
	}
	return out
}

// WriteFiles writes known_hosts and the host -> address map (JSON) into dir.
func (s *Server) WriteFiles(dir string) (knownHostsPath, mapPath string, err error) {
	knownHostsPath = filepath.Join(dir, "ssh_known_hosts")
	mapPath = filepath.Join(dir, "ssh_hosts.json")
	if err = os.WriteFile(knownHostsPath, []byte(s.KnownHosts()), 0o644); err != nil {
		return "", "", err
	}
	data, err := json.MarshalIndent(s.Endpoints(), "", "  ")
	if err != nil {
		return "", "", err
	}
	if err = os.WriteFile(mapPath, append(data, '\n'), 0o644); err != nil {
		return "", "", err
	}
	s.mu.Lock()
	s.files.knownHosts, s.files.hostMap = knownHostsPath, mapPath
	s.mu.Unlock()
	return knownHostsPath, mapPath, nil
}

// AddFault arms a fault; a refuse fault closes the host's port at once.
func (s *Server) AddFault(f Fault) (Fault, error) {
	if err := validateFault(f); err != nil {
		return Fault{}, err
	}
	if f.Host != "" {
		s.mu.Lock()
		_, ok := s.hosts[f.Host]
		s.mu.Unlock()
		if !ok {
			return Fault{}, fmt.Errorf("no SSH endpoint for host %q", f.Host)
		}
	}
	added := s.faults.add(f)
	s.applyRefusals()
	return added, nil
}

// Refresh opens or closes the ports of hosts whose SSH service started or stopped (AccessBackend).
func (s *Server) Refresh() error { return s.applyRefusals() }

// listening reports whether the host's SSH service runs (always, for a backend without AccessBackend).
func (s *Server) listening(host string) bool {
	if a, ok := s.cfg.Backend.(AccessBackend); ok {
		return a.Listening(host)
	}
	return true
}

// loginAllowed applies lockdown mode (AccessBackend) after the credentials were accepted.
func (s *Server) loginAllowed(host, user string) error {
	if a, ok := s.cfg.Backend.(AccessBackend); ok {
		if allowed, why := a.Login(host, user); !allowed {
			s.cfg.Logf("ssh %s: login of %s refused: %s", host, user, why)
			return errors.New("permission denied")
		}
	}
	return nil
}

// ClearFaults disarms the faults of host ("" = all), releases hanging commands and reopens refused ports.
func (s *Server) ClearFaults(host string) error {
	s.faults.clear(host)
	return s.applyRefusals()
}

// Faults lists the armed faults.
func (s *Server) Faults() []Fault { return s.faults.list() }

// applyRefusals closes the listeners of refused hosts and reopens the others.
func (s *Server) applyRefusals() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	var errs []error
	for name, ep := range s.hosts {
		refused := s.faults.refused(name) || !s.listening(name)
		switch {
		case refused && ep.ln != nil:
			_ = ep.ln.Close()
			ep.ln = nil
		case !refused && ep.ln == nil:
			errs = append(errs, s.listen(ep))
		}
	}
	return errors.Join(errs...)
}

func (s *Server) acceptLoop(ep *endpoint, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go s.serveConn(ep, c)
	}
}

func (s *Server) track(ep *endpoint, c net.Conn, add bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		ep.conns[c] = struct{}{}
	} else {
		delete(ep.conns, c)
	}
}

func (s *Server) sshConfig(ep *endpoint) *ssh.ServerConfig {
	checkPassword := func(user string, pass []byte) bool {
		return s.cfg.Password != "" && user == s.cfg.User &&
			subtle.ConstantTimeCompare(pass, []byte(s.cfg.Password)) == 1
	}
	cfg := &ssh.ServerConfig{
		ServerVersion: "SSH-2.0-OpenSSH_9.3 gpusim",
		PasswordCallback: func(c ssh.ConnMetadata, pass []byte) (*ssh.Permissions, error) {
			if checkPassword(c.User(), pass) {
				return nil, s.loginAllowed(ep.name, c.User())
			}
			return nil, errors.New("permission denied")
		},
		KeyboardInteractiveCallback: func(c ssh.ConnMetadata, ask ssh.KeyboardInteractiveChallenge) (*ssh.Permissions, error) {
			answers, err := ask(c.User(), "", []string{"Password: "}, []bool{false})
			if err == nil && len(answers) == 1 && checkPassword(c.User(), []byte(answers[0])) {
				return nil, s.loginAllowed(ep.name, c.User())
			}
			return nil, errors.New("permission denied")
		},
		PublicKeyCallback: func(c ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if c.User() == s.cfg.User {
				for _, k := range s.cfg.AuthorizedKeys {
					if subtle.ConstantTimeCompare(k.Marshal(), key.Marshal()) == 1 {
						return nil, s.loginAllowed(ep.name, c.User())
					}
				}
			}
			return nil, errors.New("permission denied")
		},
	}
	cfg.AddHostKey(ep.signer)
	return cfg
}

func (s *Server) serveConn(ep *endpoint, c net.Conn) {
	if !s.cfg.Backend.Reachable(ep.name) {
		_ = c.Close()
		return
	}
	s.track(ep, c, true)
	defer s.track(ep, c, false)
	defer c.Close()
	conn, chans, reqs, err := ssh.NewServerConn(c, s.sshConfig(ep))
	if err != nil {
		s.cfg.Logf("ssh %s: handshake from %s: %v", ep.name, c.RemoteAddr(), err)
		return
	}
	defer conn.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only session channels")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go s.serveSession(ep, c, ch, creqs)
	}
}

func exitStatus(code int) []byte {
	b := make([]byte, 4)
	binary.BigEndian.PutUint32(b, uint32(code))
	return b
}

func (s *Server) serveSession(ep *endpoint, conn net.Conn, ch ssh.Channel, reqs <-chan *ssh.Request) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := false
	for req := range reqs {
		switch req.Type {
		case "exec":
			var p struct{ Command string }
			if started || ssh.Unmarshal(req.Payload, &p) != nil {
				_ = req.Reply(false, nil)
				continue
			}
			started = true
			_ = req.Reply(true, nil)
			go s.exec(ctx, ep, conn, ch, p.Command)
		case "shell":
			if started {
				_ = req.Reply(false, nil)
				continue
			}
			started = true
			_ = req.Reply(true, nil)
			go s.interactive(ctx, ep, conn, ch)
		case "pty-req", "env", "window-change":
			_ = req.Reply(true, nil)
		default:
			_ = req.Reply(false, nil)
		}
	}
	// The client closed the channel (or the connection died): hanging commands stop here.
}

// runCommand applies the armed faults and then the shell. ok is false when the connection was dropped.
func (s *Server) runCommand(ctx context.Context, ep *endpoint, conn net.Conn, cmdline string) (Result, bool) {
	if !s.cfg.Backend.Reachable(ep.name) {
		_ = conn.Close()
		return Result{}, false
	}
	if f, release := s.faults.take(ep.name, cmdline); f != nil {
		switch f.Kind {
		case FaultDrop:
			_ = conn.Close()
			return Result{}, false
		case FaultFail:
			return Result{Stdout: f.Stdout, Stderr: f.Stderr, Exit: f.Exit}, true
		case FaultHang:
			select {
			case <-ctx.Done():
				return Result{}, false
			case <-release:
			}
		}
	}
	return s.shell.Run(ep.name, cmdline), true
}

func (s *Server) exec(ctx context.Context, ep *endpoint, conn net.Conn, ch ssh.Channel, cmdline string) {
	res, ok := s.runCommand(ctx, ep, conn, cmdline)
	if !ok {
		return
	}
	_, _ = ch.Write([]byte(res.Stdout))
	_, _ = ch.Stderr().Write([]byte(res.Stderr))
	_, _ = ch.SendRequest("exit-status", false, exitStatus(res.Exit))
	_ = ch.CloseWrite()
	_ = ch.Close()
}

// interactive is a minimal line-oriented shell: a prompt, one command per line, `exit` to leave.
func (s *Server) interactive(ctx context.Context, ep *endpoint, conn net.Conn, ch ssh.Channel) {
	defer ch.Close()
	prompt := "[root@" + ep.name + ":~] "
	_, _ = ch.Write([]byte(prompt))
	sc := bufio.NewScanner(ch)
	last := 0
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if line == "exit" {
			break
		}
		res, ok := s.runCommand(ctx, ep, conn, line)
		if !ok {
			return
		}
		last = res.Exit
		_, _ = ch.Write([]byte(res.Stdout))
		_, _ = ch.Stderr().Write([]byte(res.Stderr))
		_, _ = ch.Write([]byte(prompt))
	}
	_, _ = ch.SendRequest("exit-status", false, exitStatus(last))
}
