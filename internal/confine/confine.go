// Package confine shuts a process that is about to run untrusted code away from the network and from
// every file outside the paths it is given, with Linux's unprivileged mechanisms: Landlock (files,
// TCP, abstract Unix sockets, signals) and a seccomp filter (no sockets at all, no io_uring).
//
// Both apply to the calling thread only, and are inherited across execve. A Go process has many
// threads before main runs, and Landlock has no way to restrict threads other than the caller
// (github.com/landlock-lsm/go-landlock, v0.11.2 on the module proxy, gets there through libcap's psx,
// which with cgo wraps pthread_create at link time for the whole binary, the worker included). So
// Restrict is meant to be followed at once by syscall.Exec on the same locked thread: the new program
// starts with every thread confined. See transcoder/document_child.go. The raw system calls are a
// few lines over golang.org/x/sys/unix, which the module already requires.
//
// Not a network namespace: unshare(CLONE_NEWNET) needs CAP_SYS_ADMIN, or a user namespace first,
// which a multithreaded process cannot enter (EINVAL) and many hosts and container runtimes disable
// for unprivileged users (Debian's sysctl, Ubuntu's AppArmor rule, Docker's seccomp profile); it
// would have to be asked for at fork (SysProcAttr.Cloneflags) and fail the start where it is
// refused. Landlock's TCP rules and a seccomp filter refusing socket(2) need no privilege.
//
// Each layer degrades on its own: a kernel without Landlock (before 5.13, or not in its lsm= list)
// or without its network part (before 6.7) still gets the seccomp filter, and the Report says what
// was applied so the worker can log what is missing.
package confine

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Paths says what the confined program may reach in the file system; anything else is refused
// (EACCES) from the moment Restrict returns.
type Paths struct {
	ReadWrite []string // directories: read, write, create and remove files beneath (the job's scratch)
	ReadOnly  []string // files or directories to read and map (libraries, fonts); missing ones are skipped
	Exec      []string // programs that may be executed (the program execve'd next)
}

// Report says which layers are in force.
type Report struct {
	Landlock    int  // the Landlock ABI in force; 0 when the kernel has none
	Files       bool // the file system is confined (Landlock)
	TCP         bool // TCP connect and bind are refused by Landlock (ABI ≥ 4)
	Scoped      bool // abstract Unix sockets and signals outside the domain are refused (ABI ≥ 6)
	NoSockets   bool // socket(2) and io_uring are refused by seccomp
	Unsupported []string
}

// String lists the layers in force, e.g. "landlock-files, landlock-tcp, seccomp-no-sockets".
func (r Report) String() string {
	var on []string
	if r.Files {
		on = append(on, fmt.Sprintf("landlock/%d-files", r.Landlock))
	}
	if r.TCP {
		on = append(on, "landlock-tcp")
	}
	if r.Scoped {
		on = append(on, "landlock-scoped")
	}
	if r.NoSockets {
		on = append(on, "seccomp-no-sockets")
	}
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, ",")
}

// Restrict confines the calling thread (which the caller has locked with runtime.LockOSThread and
// will exec from). It sets no_new_privs, which both layers need and which makes setuid programs run
// without privileges. An error means a layer the kernel has failed in an unexpected way; a layer the
// kernel lacks is noted in the Report instead.
func Restrict(p Paths) (Report, error) {
	var r Report
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return r, fmt.Errorf("setting no_new_privs: %w", err)
	}
	if err := landlock(p, &r); err != nil {
		return r, err
	}
	if err := noSockets(&r); err != nil {
		return r, err
	}
	return r, nil
}

// Landlock's file rights by the ABI that introduced them.
const (
	fsABI1 = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	readRights  = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	writeRights = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE
	fileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
)

func landlock(p Paths, r *Report) error {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		// ENOSYS: built without it; EOPNOTSUPP: built in but not enabled (lsm= boot parameter).
		r.Unsupported = append(r.Unsupported, fmt.Sprintf("landlock (%v)", errno))
		return nil
	}
	r.Landlock = int(abi)
	handled := uint64(fsABI1)
	if abi >= 2 {
		handled |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		handled |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		handled |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	size := unsafe.Offsetof(attr.Handled_access_net) // ABI 1-3 know the file rights only
	if abi >= 4 {
		attr.Handled_access_net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
		size = unsafe.Offsetof(attr.Scoped)
	} else {
		r.Unsupported = append(r.Unsupported, fmt.Sprintf("landlock TCP rules (ABI %d < 4)", abi))
	}
	if abi >= 6 {
		attr.Scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
		size = unsafe.Offsetof(attr.Quiet_access_fs)
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return fmt.Errorf("creating a landlock ruleset (ABI %d): %w", abi, errno)
	}
	defer unix.Close(int(fd))
	add := func(path string, rights uint64, mustExist bool) error {
		f, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			if !mustExist && errors.Is(err, syscall.ENOENT) {
				return nil
			}
			return fmt.Errorf("opening %s for a landlock rule: %w", path, err)
		}
		defer unix.Close(f)
		var st unix.Stat_t
		if err := unix.Fstat(f, &st); err != nil {
			return fmt.Errorf("reading %s for a landlock rule: %w", path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			rights &= fileRights // a file takes only the rights that apply to files
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: rights & handled, Parent_fd: int32(f)}
		if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, unix.LANDLOCK_RULE_PATH_BENEATH,
			uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
			return fmt.Errorf("adding a landlock rule for %s: %w", path, errno)
		}
		return nil
	}
	for _, path := range p.ReadWrite {
		if err := add(path, readRights|writeRights|unix.LANDLOCK_ACCESS_FS_TRUNCATE, true); err != nil {
			return err
		}
	}
	for _, path := range p.ReadOnly {
		// EXECUTE beneath library directories is for the dynamic loader's own execve of nothing; it is
		// not needed to map a library (that is READ_FILE), so read-only paths get read rights only.
		if err := add(path, readRights, false); err != nil {
			return err
		}
	}
	for _, path := range p.Exec {
		if err := add(path, unix.LANDLOCK_ACCESS_FS_EXECUTE|unix.LANDLOCK_ACCESS_FS_READ_FILE, true); err != nil {
			return err
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("entering the landlock domain: %w", errno)
	}
	r.Files = true
	r.TCP = abi >= 4
	r.Scoped = abi >= 6
	return nil
}

// auditArch is the AUDIT_ARCH_* value seccomp reports for this program's system call ABI.
func auditArch() uint32 {
	switch runtime.GOARCH {
	case "amd64":
		return 0xc000003e // AUDIT_ARCH_X86_64
	case "arm64":
		return 0xc00000b7 // AUDIT_ARCH_AARCH64
	}
	return 0
}

// noSockets installs a seccomp filter that makes socket(2) and io_uring_setup(2) (whose requests can
// open sockets too) fail with EACCES, and every system call of another ABI (x32, i386 on amd64) as
// well. Nothing a document renderer does needs a socket; socketpair(2), which reaches nobody, stays.
func noSockets(r *Report) error {
	arch := auditArch()
	if arch == 0 {
		r.Unsupported = append(r.Unsupported, "seccomp on "+runtime.GOARCH)
		return nil
	}
	const (
		ld    = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
		deny  = unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES)
		allow = unix.SECCOMP_RET_ALLOW
	)
	// struct seccomp_data: nr at 0, arch at 4. Jumps count instructions skipped, forward only.
	prog := []unix.SockFilter{
		/* 0 */ {Code: ld, K: 4},
		/* 1 */ {Code: jeq, K: arch, Jt: 0, Jf: 5}, // another ABI → 7
		/* 2 */ {Code: ld, K: 0},
		/* 3 */ {Code: jge, K: 0x40000000, Jt: 3, Jf: 0}, // x32 system calls → 7
		/* 4 */ {Code: jeq, K: uint32(unix.SYS_SOCKET), Jt: 2, Jf: 0}, // → 7
		/* 5 */ {Code: jeq, K: uint32(unix.SYS_IO_URING_SETUP), Jt: 1, Jf: 0}, // → 7
		/* 6 */ {Code: ret, K: allow},
		/* 7 */ {Code: ret, K: deny},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0,
		uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		// ENOSYS, EINVAL: a kernel without seccomp filters; EPERM, EACCES: a container runtime's own
		// filter that refuses seccomp(2) (the one layer missing, not a reason to render nothing).
		if errno == unix.ENOSYS || errno == unix.EINVAL || errno == unix.EPERM || errno == unix.EACCES {
			r.Unsupported = append(r.Unsupported, fmt.Sprintf("seccomp (%v)", errno))
			return nil
		}
		return fmt.Errorf("installing the seccomp filter: %w", errno)
	}
	r.NoSockets = true
	return nil
}

// SystemReadOnly is what a dynamically linked program that renders with fonts needs to read: the
// loader's cache, libraries and their data (/usr), fontconfig's configuration and cache, and the
// random and null devices GLib opens. Not /etc as a whole (passwd, the worker's config), not /proc,
// not /home, not /tmp.
func SystemReadOnly() []string {
	return []string{"/usr", "/lib", "/lib64", "/lib32", "/etc/ld.so.cache", "/etc/fonts",
		"/var/cache/fontconfig", "/dev/null", "/dev/urandom"}
}

// Executables returns the running program's path and, for a dynamically linked one, its program
// interpreter (the dynamic loader, which execve opens for execution too): what Paths.Exec needs to
// re-execute the program once confined. Read before Restrict, which hides /proc.
func Executables() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the running program: %w", err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		return nil, fmt.Errorf("reading the running program: %w", err)
	}
	defer f.Close()
	out := []string{exe}
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return nil, fmt.Errorf("reading the running program's interpreter: %w", err)
		}
		out = append(out, strings.TrimRight(string(b), "\x00"))
	}
	return out, nil
}
