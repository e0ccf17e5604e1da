package launch

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Postgres is a PostgreSQL server of its own: a cluster initialised into a
// new directory, listening on a free loopback port (no Unix socket), with
// trust authentication for the user "postgres". PostgreSQL refuses to run as
// root; under root it runs as the user "nobody", owning its directory.
type Postgres struct {
	Dir  string // the cluster's data directory
	Addr string // 127.0.0.1:PORT
	URL  string // postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable
	Proc *Process

	bin  string
	cred *syscall.Credential
}

// postgresBinDir finds the server binaries: $POSTGRES_BIN_DIR, else the
// newest of Debian's /usr/lib/postgresql/VERSION/bin (`make postgres`
// installs them), else the PATH.
func postgresBinDir() (string, error) {
	if d := os.Getenv("POSTGRES_BIN_DIR"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("postgres: no server binaries (run `make postgres`, or set POSTGRES_BIN_DIR)")
}

func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// StartPostgres initialises a cluster in a new directory under parent (""
// for the system's temporary directory, which the server user must be able
// to reach) and starts it. Stop it with Stop; Remove deletes its directory.
func StartPostgres(parent string) (_ *Postgres, err error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	// The directory is the server user's own, in a parent it can reach.
	dir, err := os.MkdirTemp(parent, "postgres-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	p := &Postgres{Dir: filepath.Join(dir, "data"), bin: bin}
	if os.Geteuid() == 0 {
		p.cred = &syscall.Credential{Uid: 65534, Gid: 65534} // nobody:nogroup
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			return nil, err
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", p.Dir, "-U", "postgres", "--auth=trust",
		"--no-sync", "--encoding=UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	addrs, err := FreeAddrs(1)
	if err != nil {
		return nil, err
	}
	p.Addr = addrs[0]
	_, port, _ := net.SplitHostPort(p.Addr)
	p.URL = "postgres://postgres@" + p.Addr + "/postgres?sslmode=disable"
	conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nport = %s\nunix_socket_directories = ''\n"+
		"fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nshared_buffers = 32MB\nmax_connections = 20\n", port)
	f, err := os.OpenFile(filepath.Join(p.Dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString(conf)
	f.Close()
	if err != nil {
		return nil, err
	}
	return p, p.Start()
}

// Start starts the server (again, after Stop) and waits until it accepts
// sessions.
func (p *Postgres) Start() error {
	logPath := filepath.Join(filepath.Dir(p.Dir), "postgres.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	defer logf.Close()
	fi, err := logf.Stat()
	if err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	from := fi.Size() // this run's lines start here
	cmd := exec.Command(filepath.Join(p.bin, "postgres"), "-D", p.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: p.cred}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	p.Proc = &Process{Name: "postgres", Cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.Proc.done) }()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	return poll(ctx, p.Proc, "waiting for postgres", func() bool {
		b, _ := os.ReadFile(logPath)
		return int64(len(b)) > from && strings.Contains(string(b[from:]), "ready to accept connections")
	})
}

// Stop shuts the server down (fast shutdown: sessions are cut, committed
// transactions kept).
func (p *Postgres) Stop() {
	if p.Proc != nil {
		p.Proc.Signal(syscall.SIGINT)
		if !p.Proc.Wait(30 * time.Second) {
			p.Proc.Cmd.Process.Kill()
			p.Proc.Wait(10 * time.Second)
		}
	}
}

// Remove stops the server and deletes its directory.
func (p *Postgres) Remove() {
	p.Stop()
	os.RemoveAll(filepath.Dir(p.Dir))
}
