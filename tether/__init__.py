"""tether: run AI-agent sessions as supervised, durable actors.

The public API. Everything else lives in the subpackages ``tether.actors``,
``tether.supervisor`` and ``tether.runtime`` and may change without notice.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from tether.actors.actor import Actor as Actor
from tether.actors.guards.breaker import BreakerPolicy as BreakerPolicy
from tether.actors.guards.gate import ApprovalPolicy as ApprovalPolicy
from tether.actors.guards.gate import ApprovalRequest as ApprovalRequest
from tether.actors.guards.gate import Approve as Approve
from tether.actors.guards.gate import Modify as Modify
from tether.actors.guards.gate import Reject as Reject
from tether.actors.guards.loops import LoopPolicy as LoopPolicy
from tether.actors.guards.webhook import Webhook as Webhook
from tether.actors.guards.webhook import WebhookSignatureError as WebhookSignatureError
from tether.actors.guards.webhook import verify_webhook as verify_webhook
from tether.actors.messages import DeadLettered as DeadLettered
from tether.actors.messages import Event as Event
from tether.actors.messages import FallibleReply as FallibleReply
from tether.actors.messages import Message as Message
from tether.actors.messages import Terminated as Terminated
from tether.actors.model import FinalAnswer as FinalAnswer
from tether.actors.model import Model as Model
from tether.actors.model import ModelRequest as ModelRequest
from tether.actors.model import ToolCall as ToolCall
from tether.actors.model import ToolCalls as ToolCalls
from tether.actors.model import Usage as Usage
from tether.actors.ref import ActorRef as ActorRef
from tether.actors.session import AgentSession as AgentSession
from tether.actors.session import CancelTask as CancelTask
from tether.actors.session import GetSessionInfo as GetSessionInfo
from tether.actors.session import SessionInfo as SessionInfo
from tether.actors.session import TaskCall as TaskCall
from tether.actors.session import TaskResult as TaskResult
from tether.actors.session import UserMessage as UserMessage
from tether.actors.status import ActorStatus as ActorStatus
from tether.actors.status import SessionStatus as SessionStatus
from tether.actors.status import TaskStatus as TaskStatus
from tether.actors.tool import RUNTIME_KEY as RUNTIME_KEY
from tether.actors.tool import Done as Done
from tether.actors.tool import NotDone as NotDone
from tether.actors.tool import RetryPolicy as RetryPolicy
from tether.actors.tool import Tool as Tool
from tether.actors.tool import Unknown as Unknown
from tether.actors.tool import tool as tool
from tether.errors import ActorIdTaken as ActorIdTaken
from tether.errors import ActorNotFound as ActorNotFound
from tether.errors import ActorStopped as ActorStopped
from tether.errors import AlreadyApproved as AlreadyApproved
from tether.errors import AlreadyStarted as AlreadyStarted
from tether.errors import ApprovalChanged as ApprovalChanged
from tether.errors import ApprovalClosed as ApprovalClosed
from tether.errors import ApprovalNotFound as ApprovalNotFound
from tether.errors import ApprovalRejected as ApprovalRejected
from tether.errors import AskTimeout as AskTimeout
from tether.errors import ChildStartFailed as ChildStartFailed
from tether.errors import ConfigError as ConfigError
from tether.errors import CorruptRecordError as CorruptRecordError
from tether.errors import DeadLetterNotFound as DeadLetterNotFound
from tether.errors import DeterminismViolation as DeterminismViolation
from tether.errors import EffectAborted as EffectAborted
from tether.errors import EffectInterrupted as EffectInterrupted
from tether.errors import EffectNotFound as EffectNotFound
from tether.errors import JournalWriteError as JournalWriteError
from tether.errors import LoopDetected as LoopDetected
from tether.errors import MainModuleWarning as MainModuleWarning
from tether.errors import MessageDeadLettered as MessageDeadLettered
from tether.errors import MessageRejected as MessageRejected
from tether.errors import NotPermitted as NotPermitted
from tether.errors import ProviderError as ProviderError
from tether.errors import RuntimeClosed as RuntimeClosed
from tether.errors import SchemaVersionError as SchemaVersionError
from tether.errors import StaleLeaseError as StaleLeaseError
from tether.errors import StepSuspended as StepSuspended
from tether.errors import StoreError as StoreError
from tether.errors import StoreOpenError as StoreOpenError
from tether.errors import TaskFailed as TaskFailed
from tether.errors import TetherError as TetherError
from tether.errors import ToolError as ToolError
from tether.errors import ToolFailed as ToolFailed
from tether.errors import ToolInputError as ToolInputError
from tether.errors import ToolTimeout as ToolTimeout
from tether.errors import ToolUnavailable as ToolUnavailable
from tether.errors import TransientToolError as TransientToolError
from tether.runtime.audit import Identity as Identity
from tether.runtime.collector import GcPolicy as GcPolicy
from tether.runtime.quarantine import QuarantinedEffect as QuarantinedEffect
from tether.runtime.runtime import Runtime as Runtime
from tether.runtime.tree import TreeNode as TreeNode
from tether.store.admin import StoreAdmin as StoreAdmin
from tether.store.memory import MemoryStore as MemoryStore
from tether.store.open import open_store as open_store
from tether.store.open import register_backend as register_backend
from tether.store.protocol import Store as Store
from tether.store.records import AuditRecord as AuditRecord
from tether.store.records import DeadLetter as DeadLetter
from tether.store.sqlite import SqliteStore as SqliteStore
from tether.supervisor.spec import Backoff as Backoff
from tether.supervisor.spec import ChildSpec as ChildSpec
from tether.supervisor.spec import OneForAll as OneForAll
from tether.supervisor.spec import OneForOne as OneForOne
from tether.supervisor.spec import RestForOne as RestForOne
from tether.supervisor.supervisor import Supervisor as Supervisor

try:
    # One source of truth: the version in pyproject.toml, as installed.
    __version__ = _version("tether")
except _PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = (
    # actors
    "Actor",
    "ActorRef",
    "Event",
    "Message",
    "Terminated",
    "DeadLettered",
    "FallibleReply",
    # agent sessions
    "AgentSession",
    "UserMessage",
    "CancelTask",
    "GetSessionInfo",
    "SessionInfo",
    "ActorStatus",
    "SessionStatus",
    "TaskStatus",
    "TaskResult",
    "TaskCall",
    "Model",
    "ModelRequest",
    "ToolCall",
    "ToolCalls",
    "FinalAnswer",
    "Usage",
    # effects
    "tool",
    "Tool",
    "RUNTIME_KEY",
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
    "Identity",
    "Webhook",
    "verify_webhook",
    "AuditRecord",
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
    "GcPolicy",
    "Store",
    "StoreAdmin",
    "open_store",
    "register_backend",
    "SqliteStore",
    "MemoryStore",
    "DeadLetter",
    # errors
    "TetherError",
    "ConfigError",
    "MessageRejected",
    "ActorNotFound",
    "ActorStopped",
    "ActorIdTaken",
    "AlreadyStarted",
    "ChildStartFailed",
    "AskTimeout",
    "MessageDeadLettered",
    "TaskFailed",
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
    "ToolTimeout",
    "ProviderError",
    "ToolUnavailable",
    "EffectAborted",
    "EffectInterrupted",
    "DeterminismViolation",
    "StepSuspended",
    "ApprovalNotFound",
    "ApprovalClosed",
    "ApprovalChanged",
    "AlreadyApproved",
    "NotPermitted",
    "ApprovalRejected",
    "WebhookSignatureError",
    "LoopDetected",
    # warnings
    "MainModuleWarning",
)
