package testscripts

import "syscall"

const syscallTERM = syscall.SIGTERM
