package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// process is one child (etcd or kube-apiserver) running in its own process
// group with stdout and stderr going to a log file.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid after done is closed
}

// startProcess starts bin with args; its output goes to logPath.
func startProcess(name, bin string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		if p.waitErr == nil {
			return true, errors.New("exited with status 0")
		}
		return true, p.waitErr
	default:
		return false, nil
	}
}

// stop kills the process group by PID and waits for the process to end.
// Nothing it holds needs a graceful shutdown: its data is thrown away.
func (p *process) stop() {
	if p == nil {
		return
	}
	if ok, _ := p.exited(); !ok {
		killGroup(p.cmd.Process.Pid)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// logTail returns the last lines of the process' log.
func (p *process) logTail(lines int) string {
	return tailFile(p.logPath, lines)
}

func tailFile(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %s)", path, err.Error())
	}
	defer f.Close()
	const maxRead = 256 << 10
	if st, err := f.Stat(); err == nil && st.Size() > maxRead {
		if _, err := f.Seek(st.Size()-maxRead, io.SeekStart); err != nil {
			return fmt.Sprintf("(cannot read %s: %s)", path, err.Error())
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %s)", path, err.Error())
	}
	b = bytes.TrimRight(b, "\n")
	for i, n := len(b)-1, 0; i >= 0; i-- {
		if b[i] == '\n' {
			n++
			if n == lines {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// Another process may take one before it is used; start retries then.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func hostPort(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// errPortTaken marks a start that failed because a port was taken between
// choosing it and binding it.
var errPortTaken = errors.New("port already in use")

func portTaken(p *process) bool {
	return bytes.Contains([]byte(p.logTail(50)), []byte("address already in use"))
}
