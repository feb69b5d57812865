package testenv

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// WithoutLandlock makes the calling thread see a kernel without Landlock: a seccomp filter answers
// its three system calls with ENOSYS, as a kernel built without it does. Meant for a test binary
// re-executed as a confined child, on its locked thread before it confines itself, to test the
// degraded path (internal/confine, transcoder's renderer). The filter is inherited across execve.
func WithoutLandlock() error {
	runtime.LockOSThread()
	var arch uint32
	switch runtime.GOARCH {
	case "amd64":
		arch = 0xc000003e
	case "arm64":
		arch = 0xc00000b7
	default:
		return fmt.Errorf("no seccomp architecture for %s", runtime.GOARCH)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	prog := []unix.SockFilter{
		/* 0 */ {Code: ld, K: 4},
		/* 1 */ {Code: jeq, K: arch, Jt: 0, Jf: 4}, // → 6 (allow: not ours to judge)
		/* 2 */ {Code: ld, K: 0},
		/* 3 */ {Code: jeq, K: unix.SYS_LANDLOCK_CREATE_RULESET, Jt: 3, Jf: 0}, // → 7
		/* 4 */ {Code: jeq, K: unix.SYS_LANDLOCK_ADD_RULE, Jt: 2, Jf: 0}, // → 7
		/* 5 */ {Code: jeq, K: unix.SYS_LANDLOCK_RESTRICT_SELF, Jt: 1, Jf: 0}, // → 7
		/* 6 */ {Code: ret, K: unix.SECCOMP_RET_ALLOW},
		/* 7 */ {Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("installing the seccomp filter: %w", errno)
	}
	return nil
}
