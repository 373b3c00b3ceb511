-------------------------- MODULE ResultWaitKeepDone --------------------------
(***************************************************************************)
(* Mutant of ResultWait: retry_dead without `DEL done`. The element that   *)
(* the death pushed stays on the list, so every BLMOVE of a producer that  *)
(* watches the revived, running task returns at once: it watches again,    *)
(* finds the task running, and spins until the task ends again.            *)
(*                                                                         *)
(* The module EXTENDS ResultWait: everything but the revival is literally  *)
(* the original's, and KeepDoneRevive is ReviveWith(FALSE).                *)
(*                                                                         *)
(* ResultWaitKeepDone.cfg: NoSpuriousSpin breaks after 3 steps (watch, the *)
(* task dies and pushes, it is revived). Python transcription:             *)
(* result_wait.py.                                                         *)
(***************************************************************************)
EXTENDS ResultWait

KeepDoneRevive == ReviveWith(FALSE)

KeepDoneNext ==
    \/ End("completed")
    \/ End("dead")
    \/ KeepDoneRevive
    \/ \E w \in Waiters : Watch(w)
    \/ \E w \in Waiters : Block(w)
    \/ \E w \in Waiters : Wake(w)
    \/ \E w \in Waiters : Timeout(w)

KeepDoneSpec == Init /\ [][KeepDoneNext]_vars

KeepDoneAllReturn == [](~ENABLED KeepDoneNext => AllReturned)

=============================================================================
