"""tether: run AI-agent sessions as supervised, durable actors.

The public API. Everything else lives in the subpackages ``tether.actors``,
``tether.supervisor`` and ``tether.runtime`` and may change without notice.
"""

from tether.actors.actor import Actor as Actor
from tether.actors.guards.breaker import BreakerPolicy as BreakerPolicy
from tether.actors.guards.loops import LoopPolicy as LoopPolicy
from tether.actors.messages import Event as Event
from tether.actors.messages import Message as Message
from tether.actors.messages import Terminated as Terminated
from tether.actors.model import FinalAnswer as FinalAnswer
from tether.actors.model import Model as Model
from tether.actors.model import ModelRequest as ModelRequest
from tether.actors.model import ToolCall as ToolCall
from tether.actors.ref import ActorRef as ActorRef
from tether.actors.session import AgentSession as AgentSession
from tether.actors.session import CancelTask as CancelTask
from tether.actors.session import GetSessionInfo as GetSessionInfo
from tether.actors.session import SessionInfo as SessionInfo
from tether.actors.session import UserMessage as UserMessage
from tether.actors.tool import Done as Done
from tether.actors.tool import NotDone as NotDone
from tether.actors.tool import RetryPolicy as RetryPolicy
from tether.actors.tool import Tool as Tool
from tether.actors.tool import Unknown as Unknown
from tether.actors.tool import tool as tool
from tether.errors import ActorNotFound as ActorNotFound
from tether.errors import ActorStopped as ActorStopped
from tether.errors import ApprovalClosed as ApprovalClosed
from tether.errors import ApprovalNotFound as ApprovalNotFound
from tether.errors import ApprovalRejected as ApprovalRejected
from tether.errors import AskTimeout as AskTimeout
from tether.errors import ConfigError as ConfigError
from tether.errors import CorruptRecordError as CorruptRecordError
from tether.errors import DeadLetterNotFound as DeadLetterNotFound
from tether.errors import DeterminismViolation as DeterminismViolation
from tether.errors import EffectAborted as EffectAborted
from tether.errors import EffectNotFound as EffectNotFound
from tether.errors import JournalWriteError as JournalWriteError
from tether.errors import LoopDetected as LoopDetected
from tether.errors import MessageDeadLettered as MessageDeadLettered
from tether.errors import MessageRejected as MessageRejected
from tether.errors import RuntimeClosed as RuntimeClosed
from tether.errors import SchemaVersionError as SchemaVersionError
from tether.errors import StaleLeaseError as StaleLeaseError
from tether.errors import StepSuspended as StepSuspended
from tether.errors import StoreError as StoreError
from tether.errors import StoreOpenError as StoreOpenError
from tether.errors import TetherError as TetherError
from tether.errors import ToolError as ToolError
from tether.errors import ToolFailed as ToolFailed
from tether.errors import ToolInputError as ToolInputError
from tether.errors import ToolUnavailable as ToolUnavailable
from tether.errors import TransientToolError as TransientToolError
from tether.runtime.approvals import ApprovalPolicy as ApprovalPolicy
from tether.runtime.approvals import ApprovalRequest as ApprovalRequest
from tether.runtime.approvals import Approve as Approve
from tether.runtime.approvals import Modify as Modify
from tether.runtime.approvals import Reject as Reject
from tether.runtime.memory_store import MemoryStore as MemoryStore
from tether.runtime.quarantine import QuarantinedEffect as QuarantinedEffect
from tether.runtime.runtime import Runtime as Runtime
from tether.runtime.sqlite_store import SqliteStore as SqliteStore
from tether.runtime.store import DeadLetter as DeadLetter
from tether.runtime.store import Store as Store
from tether.runtime.tree import TreeNode as TreeNode
from tether.supervisor.spec import Backoff as Backoff
from tether.supervisor.spec import ChildSpec as ChildSpec
from tether.supervisor.spec import OneForAll as OneForAll
from tether.supervisor.spec import OneForOne as OneForOne
from tether.supervisor.spec import RestForOne as RestForOne
from tether.supervisor.supervisor import Supervisor as Supervisor

__all__ = (
    # actors
    "Actor",
    "ActorRef",
    "Event",
    "Message",
    "Terminated",
    # agent sessions
    "AgentSession",
    "UserMessage",
    "CancelTask",
    "GetSessionInfo",
    "SessionInfo",
    "Model",
    "ModelRequest",
    "ToolCall",
    "FinalAnswer",
    # effects
    "tool",
    "Tool",
    "RetryPolicy",
    "Done",
    "NotDone",
    "Unknown",
    "QuarantinedEffect",
    # guards
    "BreakerPolicy",
    "LoopPolicy",
    # approvals
    "ApprovalPolicy",
    "ApprovalRequest",
    "Approve",
    "Reject",
    "Modify",
    # supervision
    "Supervisor",
    "OneForOne",
    "OneForAll",
    "RestForOne",
    "ChildSpec",
    "Backoff",
    "TreeNode",
    # runtime and stores
    "Runtime",
    "Store",
    "SqliteStore",
    "MemoryStore",
    "DeadLetter",
    # errors
    "TetherError",
    "ConfigError",
    "MessageRejected",
    "ActorNotFound",
    "ActorStopped",
    "AskTimeout",
    "MessageDeadLettered",
    "DeadLetterNotFound",
    "RuntimeClosed",
    "StoreError",
    "StoreOpenError",
    "SchemaVersionError",
    "CorruptRecordError",
    "StaleLeaseError",
    "JournalWriteError",
    "EffectNotFound",
    "ToolError",
    "ToolInputError",
    "ToolFailed",
    "TransientToolError",
    "ToolUnavailable",
    "EffectAborted",
    "DeterminismViolation",
    "StepSuspended",
    "ApprovalNotFound",
    "ApprovalClosed",
    "ApprovalRejected",
    "LoopDetected",
)
