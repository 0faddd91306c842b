//! Job control on a terminal: Ctrl-Z suspends the whole job and gives the shell its prompt
//! back; `fg` resumes it.
//!
//! The command's group holds the terminal, so Ctrl-Z stops the command, not dlock. The shell
//! waits for dlock, though, and sees a job stopped only when dlock stops. So when the watchdog
//! reports the command stopped, dlock takes the terminal back and stops itself (SIGTSTP to its
//! own group, which is the shell's job); when the shell continues it (`fg`), dlock, catching
//! that SIGCONT, gives the terminal to the command's group again and continues the command. While dlock is stopped it
//! renews nothing: the lease runs to its deadline, which dlock renews once just before it
//! stops, and the watchdog (which is not stopped) ends the job before that deadline.

use crate::sys;

/// Stop dlock's own job, as the terminal would have stopped it without dlock. The stop comes
/// as the signal is taken, maybe by another thread a moment after this returns, so what
/// follows it waits for the shell's SIGCONT instead (`resume`). A group the kernel deems
/// orphaned (no shell to continue it) discards SIGTSTP: dlock then runs on with the command
/// stopped, as without a terminal, until someone sends SIGCONT.
pub fn suspend_self(terminal: &sys::Foreground) {
    terminal.take_back();
    // SAFETY: kill on our own group takes no pointers.
    unsafe { libc::kill(0, libc::SIGTSTP) };
}

/// dlock was continued: the terminal to the command's group again if the shell gave it to us
/// (`fg`; not `bg`), and the command continued.
pub fn resume(terminal: &sys::Foreground, pgid: u32) {
    terminal.give_again(pgid);
    let _ = sys::kill_group(pgid, libc::SIGCONT);
}
