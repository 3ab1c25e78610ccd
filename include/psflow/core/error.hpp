// psflow's error types and the Status that carries a failure between threads.
//
// The public API throws subclasses of psflow::Error; every message says what was wrong and
// what to do next. Internals that cross threads (executor, transport) carry a Status and turn
// it back into the typed exception on the caller's thread with Status::raise().
#pragma once

#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace psflow {

enum class ErrorCode {
  ok = 0,
  invalid_argument,
  not_found,
  already_exists,
  failed_precondition,
  unavailable,
  aborted,
  deadline_exceeded,
  data_loss,
  internal,
  out_of_range,        // an input ran out, e.g. a closed queue: the normal end of a loop (TF's
                       // OutOfRange)
  unauthenticated,     // a peer is not a member of the cluster (no or another cluster secret);
                       // never retried: it stays so until the secrets are fixed
  resource_exhausted,  // out of memory, or a request larger than this machine could hold
};

// The last code; the wire rejects codes beyond it.
inline constexpr ErrorCode kLastErrorCode = ErrorCode::resource_exhausted;

inline std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::ok:
      return "OK";
    case ErrorCode::invalid_argument:
      return "InvalidArgument";
    case ErrorCode::not_found:
      return "NotFound";
    case ErrorCode::already_exists:
      return "AlreadyExists";
    case ErrorCode::failed_precondition:
      return "FailedPrecondition";
    case ErrorCode::unavailable:
      return "Unavailable";
    case ErrorCode::aborted:
      return "Aborted";
    case ErrorCode::deadline_exceeded:
      return "DeadlineExceeded";
    case ErrorCode::data_loss:
      return "DataLoss";
    case ErrorCode::internal:
      return "Internal";
    case ErrorCode::out_of_range:
      return "OutOfRange";
    case ErrorCode::unauthenticated:
      return "Unauthenticated";
    case ErrorCode::resource_exhausted:
      return "ResourceExhausted";
  }
  return "Unknown";
}

// Base of every exception psflow throws. what() is "<Code>: <message>".
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(std::string(error_code_name(code)) + ": " + message),
        code_(code),
        message_(message) {}
  ErrorCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

#define PSFLOW_DEFINE_ERROR(Name, code_value)                                            \
  class Name : public Error {                                                            \
   public:                                                                               \
    explicit Name(const std::string& message) : Error(ErrorCode::code_value, message) {} \
  };
PSFLOW_DEFINE_ERROR(InvalidArgument, invalid_argument)
PSFLOW_DEFINE_ERROR(NotFound, not_found)
PSFLOW_DEFINE_ERROR(AlreadyExists, already_exists)
PSFLOW_DEFINE_ERROR(FailedPrecondition, failed_precondition)
PSFLOW_DEFINE_ERROR(Unavailable, unavailable)
PSFLOW_DEFINE_ERROR(Aborted, aborted)
PSFLOW_DEFINE_ERROR(DeadlineExceeded, deadline_exceeded)
PSFLOW_DEFINE_ERROR(DataLoss, data_loss)
PSFLOW_DEFINE_ERROR(Internal, internal)
PSFLOW_DEFINE_ERROR(OutOfRange, out_of_range)
PSFLOW_DEFINE_ERROR(Unauthenticated, unauthenticated)
PSFLOW_DEFINE_ERROR(ResourceExhausted, resource_exhausted)
#undef PSFLOW_DEFINE_ERROR

// Throws the psflow::Error subclass that matches `code`.
[[noreturn]] inline void throw_error(ErrorCode code, const std::string& message) {
  switch (code) {
    case ErrorCode::invalid_argument:
      throw InvalidArgument(message);
    case ErrorCode::not_found:
      throw NotFound(message);
    case ErrorCode::already_exists:
      throw AlreadyExists(message);
    case ErrorCode::failed_precondition:
      throw FailedPrecondition(message);
    case ErrorCode::unavailable:
      throw Unavailable(message);
    case ErrorCode::aborted:
      throw Aborted(message);
    case ErrorCode::deadline_exceeded:
      throw DeadlineExceeded(message);
    case ErrorCode::data_loss:
      throw DataLoss(message);
    case ErrorCode::out_of_range:
      throw OutOfRange(message);
    case ErrorCode::unauthenticated:
      throw Unauthenticated(message);
    case ErrorCode::resource_exhausted:
      throw ResourceExhausted(message);
    case ErrorCode::ok:
    case ErrorCode::internal:
      break;
  }
  throw Internal(message);
}

// A failure (or success) as a value, for hand-offs between threads.
class Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status OK() { return {}; }

  // Captures the exception in flight: a psflow::Error keeps its code, std::bad_alloc is
  // ResourceExhausted, anything else is Internal.
  static Status from_exception(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      return {e.code(), e.message()};
    } catch (const std::bad_alloc& e) {
      return {ErrorCode::resource_exhausted, std::string("out of memory (") + e.what() +
                                                 "): the tensors are larger than "
                                                 "this machine can hold now"};
    } catch (const std::exception& e) {
      return {ErrorCode::internal, e.what()};
    } catch (...) {
      return {ErrorCode::internal, "unknown exception"};
    }
  }
  static Status from_current_exception() { return from_exception(std::current_exception()); }

  bool ok() const noexcept { return code_ == ErrorCode::ok; }
  ErrorCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  std::string to_string() const {
    return ok() ? "OK" : std::string(error_code_name(code_)) + ": " + message_;
  }

  // Same code, message prefixed with where the failure happened.
  Status with_context(std::string_view context) const {
    if (ok()) return *this;
    return {code_, std::string(context) + ": " + message_};
  }

  // Throws the typed psflow::Error this status describes; does nothing when ok().
  void raise_if_error() const {
    if (!ok()) throw_error(code_, message_);
  }

 private:
  ErrorCode code_ = ErrorCode::ok;
  std::string message_;
};

}  // namespace psflow
