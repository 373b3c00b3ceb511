--------------------------------- MODULE Chord ---------------------------------
(***************************************************************************)
(* A chord (issue 20, modelled before its code): MEMBERS tasks run in      *)
(* parallel, and a callback is enqueued once every member has ended. The   *)
(* design: the group's record of which members ended (a HASH field per     *)
(* member, set with HSETNX) is written by the same script that accepts a   *)
(* member's end (ack.lua with the current token; fail.lua or reap.lua when *)
(* it dies), and that script enqueues the callback when it records the     *)
(* last member. A member that runs twice (its lease reaped while its       *)
(* holder still runs) is counted once: a stale holder's ack is refused.    *)
(* Policy for a dead member: the callback is enqueued failed, with the     *)
(* members' errors, once every member has ended.                           *)
(*                                                                         *)
(*   state[m]     pending | running | completed | dead                     *)
(*   token[m]     its fencing token; tries[m] its reaped attempts          *)
(*   held[w]      <<m, t>>: the run worker w believes it holds; <<0, 0>>   *)
(*   ended        the members the group recorded as ended                  *)
(*   counted      how many ends the group counted (= |ended| as built)     *)
(*   callback     how many times the callback was enqueued                 *)
(*   outcome      what it was enqueued as: none | ok | failed              *)
(*   intent[w]    w's note to enqueue the callback later (mutant only)     *)
(*                                                                         *)
(* Checks: CallbackAtMostOnce, CallbackAfterAll (only once every member    *)
(* ended), OutcomeRight (ok exactly when every member completed),          *)
(* CallbackFires (wherever a run stops, the callback was enqueued) and     *)
(* CallbackNotLost (the same, as a state invariant).                       *)
(* Mutants: ChordAnyAck (the count bumped by any ack, a stale one too, as  *)
(* a result arriving apart from its acknowledgement counts), and           *)
(* ChordSeparateStep (the callback enqueued by a step after the ack, which *)
(* a crash between the two skips). Python transcription: chord.py.        *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS
    MEMBERS,    \* the chord's members
    WORKERS,    \* workers, each with one slot
    RETRIES     \* reaped attempts a member may have before it dies

Members == 1..MEMBERS
Workers == 1..WORKERS
Idle == <<0, 0>>
MaxToken == RETRIES + 1

VARIABLES state, token, tries, held, ended, counted, callback, outcome, intent

vars == <<state, token, tries, held, ended, counted, callback, outcome, intent>>

TypeOK ==
    /\ state \in [Members -> {"pending", "running", "completed", "dead"}]
    /\ token \in [Members -> 0..MaxToken]
    /\ tries \in [Members -> 0..RETRIES]
    /\ held \in [Workers -> {Idle} \cup (Members \X (1..MaxToken))]
    /\ ended \subseteq Members
    /\ counted \in 0..2 * MEMBERS
    /\ callback \in 0..2
    /\ outcome \in {"none", "ok", "failed"}
    /\ intent \in [Workers -> BOOLEAN]

Init ==
    /\ state = [m \in Members |-> "pending"]
    /\ token = [m \in Members |-> 0]
    /\ tries = [m \in Members |-> 0]
    /\ held = [w \in Workers |-> Idle]
    /\ ended = {}
    /\ counted = 0
    /\ callback = 0
    /\ outcome = "none"
    /\ intent = [w \in Workers |-> FALSE]

\* The state of every member once m has gone `to`.
After(m, to) == [state EXCEPT ![m] = to]

\* The group's accounting, in the script that ends m: m recorded once, and the
\* callback enqueued when the last member is recorded.
Record(m, to) ==
    /\ ended' = ended \cup {m}
    /\ counted' = IF m \in ended THEN counted ELSE counted + 1
    /\ IF m \notin ended /\ counted + 1 = MEMBERS
       THEN /\ callback' = callback + 1
            /\ outcome' = IF \A x \in Members : After(m, to)[x] = "completed"
                          THEN "ok" ELSE "failed"
       ELSE UNCHANGED <<callback, outcome>>

Lease(w, m) ==
    /\ state[m] = "pending" /\ held[w] = Idle /\ token[m] < MaxToken
    /\ state' = [state EXCEPT ![m] = "running"]
    /\ token' = [token EXCEPT ![m] = @ + 1]
    /\ held' = [held EXCEPT ![w] = <<m, token[m] + 1>>]
    /\ UNCHANGED <<tries, ended, counted, callback, outcome, intent>>

Current(w) == held[w] # Idle /\ held[w][2] = token[held[w][1]]
                /\ state[held[w][1]] = "running"

\* ack.lua with the current token: the member completes and is recorded.
Ack(w) ==
    LET m == held[w][1] IN
    /\ held[w] # Idle /\ Current(w)
    /\ state' = After(m, "completed")
    /\ held' = [held EXCEPT ![w] = Idle]
    /\ Record(m, "completed")
    /\ UNCHANGED <<token, tries, intent>>

\* A stale holder's ack (its lease was reaped, the member maybe run again): refused.
StaleAck(w) ==
    /\ held[w] # Idle /\ ~Current(w)
    /\ held' = [held EXCEPT ![w] = Idle]
    /\ UNCHANGED <<state, token, tries, ended, counted, callback, outcome, intent>>

\* The lease runs out (its holder paused, or dead) and is reaped: retried, or dead
\* (reap.lua recording the death); the holder keeps its stale view.
Expire(m) ==
    /\ state[m] = "running"
    /\ IF tries[m] < RETRIES /\ token[m] < MaxToken
       THEN /\ state' = [state EXCEPT ![m] = "pending"]
            /\ tries' = [tries EXCEPT ![m] = @ + 1]
            /\ UNCHANGED <<ended, counted, callback, outcome>>
       ELSE /\ state' = After(m, "dead")
            /\ Record(m, "dead")
            /\ UNCHANGED tries
    /\ UNCHANGED <<token, held, intent>>

\* A worker dies: what it held is left to expire.
Crash(w) ==
    /\ held[w] # Idle \/ intent[w]
    /\ held' = [held EXCEPT ![w] = Idle]
    /\ intent' = [intent EXCEPT ![w] = FALSE]
    /\ UNCHANGED <<state, token, tries, ended, counted, callback, outcome>>

Next ==
    \/ \E w \in Workers, m \in Members : Lease(w, m)
    \/ \E w \in Workers : Ack(w)
    \/ \E w \in Workers : StaleAck(w)
    \/ \E m \in Members : Expire(m)
    \/ \E w \in Workers : Crash(w)

Spec == Init /\ [][Next]_vars

---------------------------------------------------------------------------
Ended == {"completed", "dead"}

CallbackAtMostOnce == callback <= 1

CallbackAfterAll == callback > 0 => \A m \in Members : state[m] \in Ended

OutcomeRight ==
    callback > 0 => (outcome = "ok" <=> \A m \in Members : state[m] = "completed")

\* Wherever a run stops, the callback was enqueued.
AllDone == callback = 1
CallbackFires == [](~ENABLED Next => AllDone)

\* The same as a state invariant, which every checker evaluates alike: once every
\* member has ended and no worker holds anything or means to do anything, the
\* callback was enqueued.
Stopped == /\ \A m \in Members : state[m] \in Ended
           /\ \A w \in Workers : held[w] = Idle /\ ~intent[w]
CallbackNotLost == Stopped => AllDone

=============================================================================
