"""The storage-independent tests of holding a lease: lease, its deadline, extend, set_stage and kinds.

Owns: ``LeaseSemantics``, a mixin of tests run against every storage
(tests/test_semantics_file.py and tests/test_semantics_postgres.py add it to
their QueueSemantics class, whose hooks and helpers it uses): lease (how many,
attempts, tokens, the deadline from the visibility timeout), extend, set_stage
and leasing by kind. Imports: the standard library and the public ``nobroker``
API only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nobroker import Job, JobState, NotLeasedError

if TYPE_CHECKING:
    from tests.semantics import QueueSemantics

    _Base = QueueSemantics
else:
    _Base = object


class LeaseSemantics(_Base):
    """Holding a lease: what each storage must do, through the public Queue only."""

    # ------------------------------------------------------------ lease
    def test_lease_takes_count_and_returns_what_it_can(self) -> None:
        q = self.make_queue()
        jobs = q.enqueue_many(list(range(5)))
        q.enqueue("delayed", delay=100)
        first = q.lease(3)
        self.assertEqual([job.id for job in first], [job.id for job in jobs[:3]])
        second = q.lease(3)
        self.assertEqual([job.id for job in second], [job.id for job in jobs[3:]])
        self.assertEqual(q.lease(3), [])
        for job in first + second:
            self.assertIs(job.state, JobState.LEASED)
            self.assertIs(q.get(job.id).state, JobState.LEASED)
        stats = q.stats()
        self.assertEqual((stats.ready, stats.delayed, stats.leased), (0, 1, 5))
        self.assert_survives_reopen(q)

    def test_lease_on_an_empty_queue_returns_at_once(self) -> None:
        q = self.make_queue()
        self.assertEqual(q.lease(), [])
        self.assertEqual(q.lease(10), [])
        self.assertIsNone(q.lease_one())
        self.assertEqual(q.stats().to_dict()["total"], 0)

    def test_lease_default_count_is_one(self) -> None:
        q = self.make_queue()
        q.enqueue_many([1, 2, 3])
        self.assertEqual(len(q.lease()), 1)
        job = q.lease_one()
        self.assertIsNotNone(job)
        assert job is not None
        self.assertIs(job.state, JobState.LEASED)

    def test_each_lease_adds_an_attempt_and_a_new_token(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        tokens = []
        for attempt in (1, 2, 3):
            job = self.only_lease(q)
            self.assertEqual(job.attempts, attempt)
            self.assertIsInstance(job.lease_token, str)
            self.assertTrue(job.lease_token)
            tokens.append(job.lease_token)
            self.assertEqual(q.get(job.id).attempts, attempt)
            self.assertEqual(q.get(job.id).lease_token, job.lease_token)
            q.nack(job, delay=0)
            self.assertEqual(q.get(job.id).attempts, attempt, "nack must not count a second attempt")
        self.assertEqual(len(set(tokens)), 3)

    def test_lease_deadline_uses_the_default_visibility_timeout(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        t = self.now()
        job = self.only_lease(q)
        self.assert_time(job.lease_deadline, t + 30.0)
        self.assert_time(q.get(job.id).lease_deadline, t + 30.0)

    def test_lease_deadline_uses_the_queue_visibility_timeout(self) -> None:
        q = self.make_queue(visibility_timeout=12)
        q.enqueue("work")
        self.advance(3)
        t = self.now()
        job = self.only_lease(q)
        self.assert_time(job.lease_deadline, t + 12)
        self.assert_survives_reopen(q)

    def test_lease_deadline_per_call_visibility_timeout(self) -> None:
        q = self.make_queue(visibility_timeout=12)
        q.enqueue_many(["a", "b"])
        t = self.now()
        (a,) = q.lease(1, visibility_timeout=5)
        self.assert_time(a.lease_deadline, t + 5)
        b = q.lease_one(visibility_timeout=7.5)
        assert b is not None
        self.assert_time(b.lease_deadline, t + 7.5)

    def test_a_leased_job_is_not_delivered_again_before_its_deadline(self) -> None:
        q = self.make_queue(visibility_timeout=10)
        q.enqueue("work")
        self.only_lease(q)
        self.advance(9)
        self.assertEqual(q.lease(), [])
        q = self.reopen(q)
        self.assertEqual(q.lease(), [])

    # ------------------------------------------------------------ extend
    def test_extend_sets_the_deadline_from_now(self) -> None:
        q = self.make_queue(visibility_timeout=10)
        q.enqueue("slow")
        job = self.only_lease(q)
        self.advance(4)
        t = self.now()
        extended = q.extend(job, 20)
        self.assertIsInstance(extended, Job)
        self.assert_time(extended.lease_deadline, t + 20)
        self.assertIs(extended.state, JobState.LEASED)
        self.assertEqual(extended.attempts, 1)
        self.assertEqual(extended.lease_token, job.lease_token, "a heartbeat keeps the lease it extends")
        self.assertEqual(q.get(job.id).to_dict(), extended.to_dict())
        # A heartbeat never drifts: extending again by the same amount sets the same deadline.
        again = q.extend(job, 20)
        self.assert_time(again.lease_deadline, t + 20)
        q = self.assert_survives_reopen(q)
        # A shorter extension moves the deadline closer, not further.
        self.advance(1)
        shorter = q.extend(job, 5)
        self.assert_time(shorter.lease_deadline, t + 6)

    def test_an_extended_lease_outlives_its_first_deadline(self) -> None:
        q = self.make_queue(visibility_timeout=10)
        q.enqueue("slow")
        job = self.only_lease(q)
        for _ in range(3):
            self.advance(8)
            q.extend(job, 10)
            self.assertEqual(q.lease(), [])
        q.ack(job)
        self.assertIs(q.get(job.id).state, JobState.DONE)
        self.assertEqual(q.get(job.id).attempts, 1)

    def test_extend_with_a_stale_token_is_refused_and_changes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        job = self.only_lease(q)
        self.assert_unchanged_by(q, lambda: q.extend(self.stale(job), 60), NotLeasedError)

    # ------------------------------------------------------------ stage
    def test_set_stage_is_visible_in_get_and_list_jobs(self) -> None:
        q = self.make_queue()
        q.enqueue("video")
        job = self.only_lease(q)
        staged = q.set_stage(job, "encoding")
        self.assertIsInstance(staged, Job)
        self.assertEqual(staged.stage, "encoding")
        self.assertIs(staged.state, JobState.LEASED)
        self.assertEqual(staged.lease_token, job.lease_token)
        self.assertEqual(q.get(job.id).stage, "encoding")
        self.assertEqual([j.stage for j in q.list_jobs(JobState.LEASED)], ["encoding"])
        q = self.assert_survives_reopen(q)
        self.assertEqual(q.set_stage(job, "uploading").stage, "uploading")
        self.assertEqual(q.get(job.id).stage, "uploading")
        self.assertIsNone(q.set_stage(job, None).stage)
        self.assertIsNone(q.get(job.id).stage)
        q.set_stage(job, "finishing")
        q.ack(job)
        self.assertIs(q.get(job.id).state, JobState.DONE)

    def test_set_stage_with_a_stale_token_is_refused_and_changes_nothing(self) -> None:
        q = self.make_queue()
        q.enqueue("work")
        job = self.only_lease(q)
        self.assert_unchanged_by(q, lambda: q.set_stage(self.stale(job), "x"), NotLeasedError)

    # ------------------------------------------------------------ kind
    def test_lease_kinds_picks_only_those_kinds(self) -> None:
        q = self.make_queue()
        mail = q.enqueue("mail", kind="email")
        sms = q.enqueue("sms", kind="sms", priority=5)
        plain = q.enqueue("plain")
        self.assertEqual((mail.kind, sms.kind, plain.kind), ("email", "sms", "default"))
        self.assertIsNone(q.lease_one(kinds=["push"]))
        self.assertEqual(self.lease_ids(q, 10, kinds=["email"]), [mail.id])
        self.assertEqual(self.lease_ids(q, 10, kinds=["email", "default"]), [plain.id])
        self.assertEqual(self.lease_ids(q, 10), [sms.id])
        q = self.assert_survives_reopen(q)
        self.assertEqual(q.get(sms.id).kind, "sms")

    def test_lease_without_kinds_takes_every_kind(self) -> None:
        q = self.make_queue()
        ids = [q.enqueue(k, kind=k).id for k in ("a", "b", "default")]
        self.assertEqual(self.lease_ids(q, 10), ids)

    def test_list_jobs_by_kind(self) -> None:
        q = self.make_queue()
        a1 = q.enqueue(1, kind="a")
        q.enqueue(2, kind="b")
        a2 = q.enqueue(3, kind="a")
        self.assertEqual([j.id for j in q.list_jobs(kind="a")], [a1.id, a2.id])
        self.assertEqual([j.id for j in q.list_jobs(JobState.READY, kind="a", limit=1)], [a1.id])
