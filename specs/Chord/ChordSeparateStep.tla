---------------------------- MODULE ChordSeparateStep ----------------------------
(***************************************************************************)
(* Mutant of Chord: the ack only records the member; the worker whose ack  *)
(* recorded the last one enqueues the callback in a step of its own       *)
(* afterwards. A crash between the two loses the callback: CallbackNotLost *)
(* breaks (every member ended, nobody left to enqueue it, no callback).    *)
(* Python transcription: chord.py.                                         *)
(***************************************************************************)
EXTENDS Chord

\* The ack records the member and leaves the callback to a later step.
RecordOnly(m, to) ==
    /\ ended' = ended \cup {m}
    /\ counted' = IF m \in ended THEN counted ELSE counted + 1
    /\ UNCHANGED <<callback, outcome>>

SeparateAck(w) ==
    LET m == held[w][1] IN
    /\ held[w] # Idle /\ Current(w)
    /\ state' = After(m, "completed")
    /\ held' = [held EXCEPT ![w] = Idle]
    /\ RecordOnly(m, "completed")
    /\ intent' = [intent EXCEPT ![w] = m \notin ended /\ counted + 1 = MEMBERS]
    /\ UNCHANGED <<token, tries>>

\* The separate step: enqueue the callback the worker noted.
Fire(w) ==
    /\ intent[w]
    /\ intent' = [intent EXCEPT ![w] = FALSE]
    /\ callback' = callback + 1
    /\ outcome' = IF \A x \in Members : state[x] = "completed" THEN "ok" ELSE "failed"
    /\ UNCHANGED <<state, token, tries, held, ended, counted>>

SeparateNext ==
    \/ \E w \in Workers, m \in Members : Lease(w, m)
    \/ \E w \in Workers : SeparateAck(w)
    \/ \E w \in Workers : StaleAck(w)
    \/ \E m \in Members : Expire(m)
    \/ \E w \in Workers : Crash(w)
    \/ \E w \in Workers : Fire(w)

SeparateSpec == Init /\ [][SeparateNext]_vars

SeparateCallbackFires == [](~ENABLED SeparateNext => AllDone)

=============================================================================
