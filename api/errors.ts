// The control API's errors: an HTTP status, a stable type and a message that says what to fix,
// sent as `{ error: { type, message } }`.
export class ApiError extends Error {
  constructor(
    readonly statusCode: number,
    readonly type: string,
    message: string,
  ) {
    super(message);
  }
}
