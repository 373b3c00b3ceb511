--------------------------- MODULE ProgressTokenless ---------------------------
(***************************************************************************)
(* Mutant of Progress: the value kept without the token of the run that    *)
(* said it, and shown whatever run said it. The task leased again shows   *)
(* the previous run's progress before its own run says anything:          *)
(* NoStaleShown breaks.                                                    *)
(* Python transcription: progress.py.                                      *)
(***************************************************************************)
EXTENDS Progress

TokenlessShown == record.value

TokenlessNoStaleShown == TokenlessShown # 0 => TokenlessShown = Current

=============================================================================
